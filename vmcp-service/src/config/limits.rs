//! Bounds on what the configuration loader will read and parse.
//!
//! The YAML parser takes time quadratic in flow nesting (4,000 levels: about a
//! second; 100,000: minutes) and reads whatever it is given, so the loader refuses
//! before parsing: files that are not regular files (`/dev/zero`, FIFOs), more than
//! [`MAX_CONFIG_BYTES`], or nested deeper than [`MAX_DEPTH`].

use std::io::Read;
use std::path::Path;

use super::ConfigError;

/// The largest configuration accepted (bytes).
pub const MAX_CONFIG_BYTES: usize = 4 * 1024 * 1024;
/// The deepest flow nesting (`[`, `{`) accepted.
pub const MAX_DEPTH: usize = 64;
/// At most this many ignored keys are listed (the rest are counted).
pub const MAX_LISTED_IGNORED: usize = 100;

/// Read a configuration file: a regular file of at most [`MAX_CONFIG_BYTES`].
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    let cannot = |source: std::io::Error| ConfigError::Io {
        path: path.to_owned(),
        source,
    };
    let refused = |why: String| cannot(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
    let file = open_without_blocking(path).map_err(cannot)?;
    let metadata = file.metadata().map_err(cannot)?;
    if !metadata.is_file() {
        return Err(refused("not a regular file".into()));
    }
    let too_large = || refused(format!("larger than {MAX_CONFIG_BYTES} bytes"));
    if metadata.len() > MAX_CONFIG_BYTES as u64 {
        return Err(too_large());
    }
    // The file may grow after the check: read one byte past the limit at most.
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| refused("not UTF-8".into()))
}

/// Open `path` for reading. On Unix with `O_NONBLOCK`: opening a FIFO with no writer
/// would otherwise wait for one forever (the type check comes after the open, so it
/// cannot be skipped by swapping the file in between). Regular files ignore the flag.
fn open_without_blocking(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(nix::libc::O_NONBLOCK);
    }
    options.open(path)
}

/// Refuse text over the size limit or nested deeper than [`MAX_DEPTH`].
pub(crate) fn check(yaml: &str) -> Result<(), ConfigError> {
    if yaml.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::Parse(format!(
            "larger than {MAX_CONFIG_BYTES} bytes"
        )));
    }
    match flow_depth_exceeds(yaml.as_bytes(), MAX_DEPTH) {
        Some((line, column)) => Err(ConfigError::Parse(format!(
            "nested deeper than {MAX_DEPTH} levels at line {line} column {column}"
        ))),
        None => Ok(()),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    /// Where a token may begin: a bracket here opens a flow collection.
    TokenStart,
    /// Inside a plain scalar: brackets are text in block context and end it in flow.
    Plain,
    Double,
    Single,
    Comment,
}

/// Where flow nesting first exceeds `max` (1-based line and column), if it does.
///
/// Follows YAML's tokenisation closely enough never to undercount: quotes open a
/// quoted scalar only where a token begins, brackets inside quoted scalars and
/// comments do not count, and inside flow collections a bracket always counts.
/// It may overcount (a bracket at the start of a line of a block scalar), which only
/// matters for text that is nested in appearance that deeply.
fn flow_depth_exceeds(text: &[u8], max: usize) -> Option<(usize, usize)> {
    let mut depth = 0usize;
    let mut state = State::TokenStart;
    let (mut line, mut column) = (1usize, 0usize);
    let mut previous = b'\n';
    let mut bytes = text.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        column += 1;
        if b == b'\n' {
            line += 1;
            column = 0;
        }
        let after_space = matches!(previous, b' ' | b'\t' | b'\n' | b'\r');
        previous = b;
        match state {
            State::Comment => {
                if b == b'\n' {
                    state = State::TokenStart;
                }
            }
            State::Double => match b {
                b'\\' => {
                    bytes.next();
                    column += 1;
                    previous = b' ';
                }
                b'"' => state = State::Plain,
                _ => {}
            },
            State::Single => {
                if b == b'\'' {
                    if bytes.peek() == Some(&b'\'') {
                        bytes.next();
                        column += 1;
                    } else {
                        state = State::Plain;
                    }
                }
            }
            State::TokenStart | State::Plain => {
                let token_start = state == State::TokenStart;
                match b {
                    b'[' | b'{' if token_start || depth > 0 => {
                        depth += 1;
                        if depth > max {
                            return Some((line, column));
                        }
                        state = State::TokenStart;
                    }
                    b']' | b'}' if depth > 0 => {
                        depth -= 1;
                        state = State::Plain;
                    }
                    b',' if depth > 0 => state = State::TokenStart,
                    b'"' if token_start => state = State::Double,
                    b'\'' if token_start => state = State::Single,
                    b'#' if after_space => state = State::Comment,
                    b'\n' => state = State::TokenStart,
                    b' ' | b'\t' | b'\r' => {
                        // `: ` and `- ` (and `? `) end a token in both contexts.
                    }
                    b':' | b'-' | b'?' => {
                        if matches!(bytes.peek(), Some(b' ' | b'\t' | b'\n' | b'\r') | None)
                            && (token_start || b == b':')
                        {
                            state = State::TokenStart;
                        } else if token_start {
                            state = State::Plain;
                        }
                    }
                    _ => state = State::Plain,
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep(open: &str, close: &str, n: usize) -> String {
        format!("a: {}{}\n", open.repeat(n), close.repeat(n))
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing() {
        assert!(check(&deep("[", "]", MAX_DEPTH)).is_ok());
        assert!(check(&deep("[", "]", MAX_DEPTH + 1)).is_err());
        assert!(check(&deep("{a: ", "}", 100_000)).is_err());
        // Quoted closers must not hide real nesting.
        let sneaky = format!(
            "a: [\"{}\", {}{}]\n",
            "]".repeat(100),
            "[".repeat(MAX_DEPTH),
            "]".repeat(MAX_DEPTH)
        );
        assert!(check(&sneaky).is_err());
        // A quote inside a flow plain scalar is text, not the start of a string.
        let sneaky = format!("a: [x 'y, {}]\n", "[".repeat(MAX_DEPTH + 1));
        assert!(check(&sneaky).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = std::env::temp_dir().join(format!("vmcp-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.yaml");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        // A blocking open would never return: run it on a thread and bound the wait.
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || tx.send(read(&path).map_err(|e| e.to_string())));
        let result = rx.recv_timeout(std::time::Duration::from_secs(5));
        let _ = std::fs::remove_file(&fifo);
        let error = result.expect("read returns without a writer").unwrap_err();
        assert!(error.contains("not a regular file"), "{error}");
    }

    #[test]
    fn brackets_in_text_do_not_count() {
        let many = "[".repeat(200);
        for yaml in [
            format!("a: \"{many}\"\n"),
            format!("a: '{many}'\n"),
            format!("a: it's {many}\n"),
            format!("a: b # {many}\n"),
            format!("a: \"\\\"{many}\"\n"),
        ] {
            assert!(check(&yaml).is_ok(), "{yaml}");
        }
    }
}

"""Validate documents against a JSON Schema with the `jsonschema` package.

Reads {"schema": {...}, "documents": {"name": {...}, ...}} on stdin and prints
{"name": ["error", ...], ...}: an empty list for a valid document.
"""

import json
import sys

import jsonschema


def main() -> None:
    request = json.load(sys.stdin)
    validator_class = jsonschema.validators.validator_for(request["schema"])
    validator_class.check_schema(request["schema"])
    validator = validator_class(request["schema"])
    report = {}
    for name, document in request["documents"].items():
        report[name] = [
            f"{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
            for error in validator.iter_errors(document)
        ]
    print(json.dumps(report))


if __name__ == "__main__":
    main()

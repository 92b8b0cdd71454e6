#!/usr/bin/env python3
"""Compare conformance results of the fixture (direct) and the gateway, one revision.

usage: compare.py REVISION FIXTURE_DIR GATEWAY_DIR BASELINE_YML REQUIREMENTS_YAML

Each *_DIR is a conformance `-o` directory: one `server-<scenario>-<timestamp>/checks.json`
per scenario. A check counts as passed when its status is SUCCESS and as failed when it
is FAILURE or WARNING (the suite's own rule); SKIPPED and INFO count as neither.

Prints one summary line per target and the checks the fixture passes but the gateway
fails (FAILURE, WARNING, or missing). Exits 1 when such a check is not covered by the
baseline (`scenario` or `scenario:check-id` under `server:`), 0 otherwise. A check the
suite reports as INFO or SKIPPED through the gateway (not applicable to a valid choice
the gateway made, such as a plain JSON body where the fixture streamed SSE) is listed
but is not a failure. Standard library only.
"""

import json
import os
import re
import sys
from collections import OrderedDict

FAILED = {"FAILURE", "WARNING"}


def load(directory):
    """{scenario: {check_id: worst status}} from a results directory, and the tool
    names the `tools-list` check saw."""
    severity = {"FAILURE": 4, "WARNING": 3, "SUCCESS": 2, "SKIPPED": 1, "INFO": 0}
    results, tools = OrderedDict(), None
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry, "checks.json")
        match = re.match(r"^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$", entry)
        if not match or not os.path.exists(path):
            continue
        checks = results.setdefault(match.group(1), OrderedDict())
        with open(path) as f:
            for check in json.load(f):
                status = check.get("status", "INFO")
                if check["id"] == "tools-list":
                    # The fixture's trigger tools really add and remove one tool, so
                    # it is present in one run and not the other: not a rename.
                    names = (check.get("details") or {}).get("tools") or []
                    tools = sorted(n for n in names if not n.startswith("test_trigger_added_"))
                old = checks.get(check["id"])
                if old is None or severity.get(status, 0) > severity.get(old, 0):
                    checks[check["id"]] = status
    return results, tools


def yaml_list(path, section):
    """The `- item` entries under `section:` in a simple YAML file (comments ignored)."""
    items, current = [], None
    with open(path) as f:
        for raw in f:
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            header = re.match(r"^([A-Za-z0-9_./-]+):\s*(\[\])?$", line)
            if header:
                current = header.group(1)
                continue
            item = re.match(r"^\s+-\s+(\S+)$", line)
            if item and current == section:
                items.append(item.group(1).strip("'\""))
    return items


def scored_scenarios(requirements):
    return set(yaml_list(requirements, "server"))


def tally(results, scenarios):
    passed = failed = 0
    for scenario, checks in results.items():
        if scenario not in scenarios:
            continue
        for status in checks.values():
            passed += status == "SUCCESS"
            failed += status in FAILED
    return passed, failed


def main():
    revision, fixture_dir, gateway_dir, baseline, requirements = sys.argv[1:6]
    (fixture, fixture_tools), (gateway, gateway_tools) = load(fixture_dir), load(gateway_dir)
    scored = scored_scenarios(requirements)
    everything = set(fixture) | set(gateway)
    for name, results in (("fixture", fixture), ("gateway", gateway)):
        sp, sf = tally(results, scored)
        ap, af = tally(results, everything)
        print(
            f"conformance {revision} {name}: {sp} passed, {sf} failed (scored scenarios);"
            f" {ap} passed, {af} failed (every scenario run)"
        )

    entries = yaml_list(baseline, "server")
    whole = {e for e in entries if ":" not in e}
    single = {tuple(e.split(":", 1)) for e in entries if ":" in e}

    regressions, uncovered, unexercised = [], [], []
    for scenario, checks in fixture.items():
        for check_id, status in checks.items():
            if status != "SUCCESS":
                continue
            theirs = gateway.get(scenario, {}).get(check_id, "MISSING")
            if theirs == "SUCCESS":
                continue
            if theirs in ("INFO", "SKIPPED"):
                # The suite found the check not applicable to the gateway's (valid)
                # choice, e.g. plain JSON where the fixture streamed SSE. Not a failure.
                unexercised.append((scenario, check_id, theirs))
                continue
            regressions.append((scenario, check_id, theirs))
            if scenario not in whole and (scenario, check_id) not in single:
                uncovered.append((scenario, check_id, theirs))
    print(f"conformance {revision} parity:  {len(regressions)} check(s) pass at the fixture but not"
          f" through the gateway; {len(regressions) - len(uncovered)} of them are baselined")
    for scenario, check_id, status in uncovered:
        print(f"  not baselined: {scenario}:{check_id} -> {status}")
    for scenario, check_id, status in unexercised:
        print(f"  not exercised through the gateway (the suite reports {status}): {scenario}:{check_id}")
    renamed = fixture_tools != gateway_tools
    if renamed:
        print(f"conformance {revision}: the gateway does not pass tool names through unchanged:\n"
              f"  fixture: {fixture_tools}\n  gateway: {gateway_tools}")
    return 1 if uncovered or renamed else 0


if __name__ == "__main__":
    sys.exit(main())

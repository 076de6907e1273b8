#!/usr/bin/python3
"""Reads a Prometheus text exposition from the file named by the only
argument, parses it with the Python client's reference parser
(prometheus_client.parser, Debian's python3-prometheus-client) and prints
what it found, one line each:

    TYPE <family> <counter|gauge|histogram|summary|untyped>
    SAMPLE <name>{<label>="<value>",...} <value>

labels sorted by name, label values as JSON strings. Exits 1 with the
parser's complaint when the text is not a valid exposition.
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        text = f.read()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser raises ValueError and friends
        print(f"not a valid exposition: {e!r}", file=sys.stderr)
        return 1
    for family in families:
        print(f"TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(sample.labels.items()))
            print(f"SAMPLE {sample.name}{{{labels}}} {sample.value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

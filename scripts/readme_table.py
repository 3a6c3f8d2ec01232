"""Regenerates the UCCL_* table of README.md from the installed uccl (uccl.config()).

    python scripts/readme_table.py          # rewrite README.md between the markers
    python scripts/readme_table.py --check  # exit 1 when README.md is out of date

tests/test_api.py checks that every variable appears in README.md.
"""
import os
import sys

BEGIN, END = "<!-- uccl-config-table:begin -->", "<!-- uccl-config-table:end -->"
README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def table():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    import uccl
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for v in uccl.config():
        default = f"`{v['default']}`" if v["default"] != "" else "(unset)"
        rows.append(f"| `{v['name']}` | {default} | {v['meaning'].replace('|', '/')} |")
    return "\n".join(rows)


def main(argv):
    text = open(README).read()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if "--check" in argv:
        if new != text:
            print("README.md's variable table is out of date: run python scripts/readme_table.py", file=sys.stderr)
            return 1
        return 0
    open(README, "w").write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

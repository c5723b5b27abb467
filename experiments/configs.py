"""The shipped configs: `python -m experiments.configs` lists every gin file under gin_configs/
with the first sentence of its header comment, ready for `experiments.run --gin_file=...`.

Importing this module is cheap: it reads text files and imports nothing of TensorFlow.
"""

import os
import re
import sys
import textwrap

import gin_configs

CONFIG_DIR = os.path.dirname(os.path.abspath(gin_configs.__file__))
# A sentence ends at a full stop before a space or the end, but not in "et al." or "e.g.".
_ASIDE = re.compile(r"\s\([^()]*[,:;/.][^()]*\)")
_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)")


def shipped() -> list[tuple[str, str]]:
    """(path inside gin_configs/, description) of every shipped gin file, by family and name."""
    found = []
    for folder, _, names in os.walk(CONFIG_DIR):
        for name in names:
            if name.endswith(".gin"):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, CONFIG_DIR).replace(os.sep, "/")
                found.append((relative, description(path)))
    return sorted(found)


def description(path: str) -> str:
    """The first sentence of the file's header comment (its leading `#` lines), without its
    asides: parentheses after a space holding a list, a path or a citation (a comma, colon,
    semicolon, slash or full stop), not formulas such as `(1 - tau) * target`; "" for a file
    without a header."""
    header = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            header.append(line.lstrip("#").strip())
    text = " ".join(" ".join(header).split())
    while True:  # innermost parentheses first: "(a (b, c) d)"
        shorter = _ASIDE.sub("", text)
        if shorter == text:
            break
        text = shorter
    end = _SENTENCE_END.search(text)
    return text[: end.start() + 1] if end else text


def listing(width: int = 100) -> str:
    """The shipped configs as lines for the console: each path, and its description wrapped
    beside it."""
    configs = shipped()
    column = max(len(path) for path, _ in configs) + 2
    lines = [
        f"{len(configs)} shipped configs in {CONFIG_DIR}; train one with "
        "`python -m experiments.run --gin_file=<config>` (e.g. --gin_file=dqn/cartpole.gin):",
        "",
    ]
    for path, text in configs:
        wrapped = textwrap.wrap(text, max(20, width - column - 2), break_on_hyphens=False) or [""]
        lines.append(f"  {path.ljust(column)}{wrapped[0]}")
        lines += [f"  {' ' * column}{rest}" for rest in wrapped[1:]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print(
            f"experiments.configs: error: it takes no arguments, got {' '.join(argv[1:])}; "
            "it lists every shipped gin file.",
            file=sys.stderr,
        )
        return 1
    print(listing())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

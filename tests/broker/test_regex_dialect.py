"""Schema patterns read as ECMA-262: the RE2 and Python translations against a real ECMA engine.

Node.js (``RegExp`` with the ``u`` flag, as JSON Schema validators in JavaScript use it) is the
reference: for a few hundred generated patterns and a set of texts chosen for where the dialects
differ (Unicode digits and spaces, line terminators, astral characters), both translations must
give Node's answer. The separate process searches with Python's ``re`` where RE2 cannot, so the
two must agree with each other as well as with Node.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess

import pytest
import re2

from codemode._ecma_regex import EcmaSyntaxError, translate

pytestmark = pytest.mark.integration

TEXTS = [
    *("", "a", "ab", "ba1", "A", "1", "\u0663", " ", "a\n", "\r", "\u2028", "\u00a0", "é", "-", "."),
    *("\t", "\ufeff", "\U0001f600", "a-b", "aa bb", "_x9", "\u1680", "ab\nab", "b.a"),
]

ATOMS = [
    "a", "b", "1", "-", "\\.", ".", "\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "[ab]", "[^a]",
    "[\\d\\s]", "[^\\w]", "[a-c]", "\\u00e9", "\\x41", "\\u{1F600}", "\\uD83D\\uDE00", "[^]", "[\\S]",
    "\\t", "\\n", "\\cJ", "\\/", "[.]", "[\\b]", "\\p{L}", "[\\p{Nd}a]",
]  # fmt: skip
ASSERTIONS = ["^", "$", "\\b", "\\B"]
QUANTIFIERS = ["", "", "", "*", "+", "?", "{1,2}", "{2}", "*?", "+?", "{0,}"]


def pattern(rng: random.Random, depth: int = 0) -> str:
    """A random ECMA-262 pattern without look-arounds or references (RE2 runs it)."""
    parts: list[str] = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.12:
            parts.append(rng.choice(ASSERTIONS))
            continue
        if roll < 0.25 and depth < 2:
            inner = pattern(rng, depth + 1)
            if rng.random() < 0.4:
                inner += "|" + pattern(rng, depth + 1)
            atom = ("(" if rng.random() < 0.5 else "(?:") + inner + ")"
        else:
            atom = rng.choice(ATOMS)
        parts.append(atom + rng.choice(QUANTIFIERS))
    return "".join(parts)


NODE_SCRIPT = """
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = cases.map(([source, texts]) => {
  let re;
  try { re = new RegExp(source, "u"); } catch (e) { return null; }
  return texts.map((t) => re.test(t));
});
process.stdout.write(JSON.stringify(out));
"""


def node_answers(cases: list[tuple[str, list[str]]]) -> list[list[bool] | None]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (./dev installs it for the conformance suite)")
    done = subprocess.run(
        [node, "-e", NODE_SCRIPT], input=json.dumps(cases), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_both_translations_answer_as_an_ecma_262_engine_does() -> None:
    rng = random.Random(36)
    sources = list(dict.fromkeys(pattern(rng) for _ in range(400)))
    answers = node_answers([(source, TEXTS) for source in sources])
    options = re2.Options()
    options.never_capture = True
    compared = 0
    for source, expected in zip(sources, answers, strict=True):
        if expected is None:
            continue  # not a pattern to Node (a quantified assertion, say): nothing to compare
        translation = translate(source)
        assert translation.backtracking == (), source
        program = re2.compile(translation.re2, options)
        for text, want in zip(TEXTS, expected, strict=True):
            assert (program.search(text.encode()) is not None) == want, (source, text, translation.re2)
            if translation.python is not None:
                found = re.compile(translation.python, re.ASCII).search(text) is not None
                assert found == want, (source, text, translation.python)
        compared += 1
    assert compared > 300, "most generated patterns are valid ECMA-262"


@pytest.mark.parametrize(
    "source",
    ["(?i)a", "\\q", "a**", "a{2}{3}", "[z-a]", "(a", "a)", "\\k<nope>", "\\2(a)", "\\u{110000}", "\\c1"],
)
def test_what_ecma_262_refuses_is_refused(source: str) -> None:
    (answer,) = node_answers([(source, ["a"])])
    assert answer is None, "Node refuses it too"
    with pytest.raises(EcmaSyntaxError):
        translate(source)

"""Untrusted server text becomes inert source text (codemode/stubs/_sanitize.py)."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemode.errors import StubRenderError
from codemode.stubs._sanitize import Untrusted, clean_text, comment, docline, docstring, first_sentence, pystr

INVISIBLE = [
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u202a",
    "\u2066",  # LEFT-TO-RIGHT ISOLATE
    "\u2069",
    "\u200b",  # ZERO WIDTH SPACE
    "\u200d",
    "\ufeff",
    "\U000e0041",  # TAG LATIN CAPITAL LETTER A
    "\U000e007f",
    "\ufe0f",  # variation selector
    "\ue000",  # private use
    "\x00",
    "\x1b",
]

HOSTILE = [
    '"""',
    "'''",
    '""""""',
    'x"',
    "\\",
    "trailing backslash \\",
    '\\"""',
    "\\N{BULLET}",
    "\\x41\\u0041",
    "\x00",
    'ok"""\nimport os\nos.system("touch /tmp/pwned")\n"""',
    "line\r\nbreak\rcr",
    "para\u2028sep\u2029",
    "# -*- coding: utf-7 -*-",
    "\u202eevil\u202c",
    "tag\U000e0041\U000e0042\U000e0043",
]


def as_docstring_module(text: str) -> str:
    return f'def f():\n    """{text}"""\n'


@pytest.mark.parametrize("text", HOSTILE)
def test_no_description_can_close_the_docstring_or_form_an_escape(text: str):
    source = as_docstring_module(docstring(Untrusted(text), 500, 4))
    module = ast.parse(source)
    function = module.body[0]
    assert isinstance(function, ast.FunctionDef)
    assert len(function.body) == 1  # still only the docstring: nothing leaked out as code
    assert isinstance(function.body[0], ast.Expr)


@pytest.mark.parametrize("char", INVISIBLE)
def test_invisible_bidi_and_tag_characters_are_removed(char: str):
    cleaned = clean_text(f"a{char}b", 100)
    assert cleaned == "ab"


def test_line_and_paragraph_separators_become_newlines_and_cr_is_normalised():
    assert clean_text("a\u2028b\r\nc\rd", 100) == "a\nb\nc\nd"


def test_a_megabyte_description_is_capped_quickly():
    text = "A" * 1_000_000
    result = docstring(Untrusted(text), 2000)
    assert len(result) <= 2000
    assert result.endswith("…")


def test_a_megabyte_of_zero_width_characters_hides_nothing_after_it():
    assert clean_text("\u200b" * 1_000_000 + "secret", 100) == ""


def test_comments_are_single_lines():
    text = comment(Untrusted("first\nimport os\r\nsecond\u2028third"), 300)
    assert "\n" not in text
    assert "\r" not in text
    assert "\u2028" not in text


def test_pystr_reads_back_exactly_and_escapes_every_invisible_character():
    value = "a\"b'c\\d\ne\u202ef\U000e0041\x00"
    literal = pystr(Untrusted(value))
    assert "\n" not in literal
    assert "\u202e" not in literal
    assert "\U000e0041" not in literal
    assert ast.literal_eval(literal) == value


def test_untrusted_text_refuses_to_become_a_string_implicitly():
    with pytest.raises(StubRenderError):
        str(Untrusted("x"))


def test_the_first_sentence_is_one_clean_line():
    assert first_sentence("Fetch one customer. Then more.\nAnd more.") == "Fetch one customer."
    assert first_sentence("No full stop\n\nsecond paragraph") == "No full stop"
    assert first_sentence("Line one\nline two") == "Line one line two"


@given(st.text(alphabet=st.characters(exclude_categories=[]), max_size=400), st.integers(0, 12))
@settings(max_examples=500, deadline=None)
def test_any_text_is_an_inert_docstring(text: str, indent: int):
    body = docstring(Untrusted(text), 300, indent)
    module = ast.parse(f'x = """{body}"""\n')
    assert len(module.body) == 1
    value = ast.literal_eval(f'"""{body}"""')
    for char in ("\u202e", "\u2066", "\u200b", "\x00", "\r"):
        assert char not in value


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_any_text_is_an_inert_docline_and_comment(text: str):
    line = docline(Untrusted(text), 100)
    assert "\n" not in line
    module = ast.parse(f'x = """{line}"""  # {comment(Untrusted(text), 100)}\n')
    assert len(module.body) == 1

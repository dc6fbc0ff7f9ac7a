"""The search tokeniser splits identifiers, normalises words and agrees with itself on both sides."""

from __future__ import annotations

import pytest

from codemode.search._tokenize import clear_caches, stem, tokenize


def test_snake_case_is_split_into_words() -> None:
    assert tokenize("list_pull_request_files") == ["list", "pull", "request", "fil"]


def test_camel_case_and_acronyms_are_split() -> None:
    assert tokenize("getHTTPResponse") == ["get", "http", "respons"]
    assert tokenize("postMessage") == ["post", "messag"]
    assert tokenize("findFreeSlots") == ["find", "fre", "slot"]


def test_plural_acronyms_stay_one_word() -> None:
    assert tokenize("listURLs") == ["list", "url"]
    assert tokenize("APIs") == ["api"]


def test_kebab_case_and_dots_are_split() -> None:
    assert tokenize("repos.list-commits") == ["repository", "list", "commit"]
    assert tokenize("query-a-database") == ["query", "databas"]


def test_text_is_lowercased_and_punctuation_stripped() -> None:
    assert tokenize("Fetch ONE customer!!! (by id), e.g. #42.") == ["fetch", "customer", "id", "42"]


def test_stop_words_and_single_letters_are_dropped() -> None:
    assert tokenize("the a of to for in x y z") == []
    assert tokenize("what is the weather") == ["weather"]


@pytest.mark.parametrize(
    ("words", "stem_"),
    [
        (["create", "created", "creating", "creates", "creation"], "creat"),
        (["delete", "deleted", "deleting", "deletion"], "delet"),
        (["deploy", "deploys", "deployed", "deployment", "deployments"], "deploy"),
        (["branch", "branches"], "branch"),
        (["query", "queries"], "query"),
        (["message", "messages"], "messag"),
        (["run", "running", "runs"], "run"),
        (["commit", "commits", "committed"], "commit"),
        (["status", "statuses"], "status"),
        (["address", "addresses"], "address"),
    ],
)
def test_word_forms_share_one_stem(words: list[str], stem_: str) -> None:
    assert {stem(word) for word in words} == {stem_}


def test_short_and_protected_words_are_not_mangled() -> None:
    assert stem("bus") == "bus"
    assert stem("string") == "string"
    assert stem("kubernetes") == "kubernetes"
    assert stem("comment") == "comment"


def test_common_abbreviations_expand_to_the_full_word() -> None:
    assert tokenize("repo") == tokenize("repository")
    assert tokenize("k8s pods") == ["kubernetes", "pod"]
    assert tokenize("open PRs") == ["open", "pull", "request"]
    assert tokenize("db config") == ["databas", "configurat"]


def test_phrasal_verbs_read_as_the_verb_they_mean() -> None:
    assert tokenize("look for errors") == ["search", "error"]
    assert tokenize("get rid of spam") == ["delet", "spam"]
    assert tokenize("look") == ["look"]


def test_unicode_words_survive_and_digits_stay_attached() -> None:
    assert tokenize("café naïve 日本語") == ["café", "naïv", "日本語"]
    assert tokenize("v2 utf8 s3") == ["v2", "utf8", "s3"]


def test_empty_and_symbol_only_text_gives_no_tokens() -> None:
    assert tokenize("") == []
    assert tokenize("--- ... /// ___ !!!") == []


def test_results_do_not_depend_on_the_caches() -> None:
    text = "Create or update a FileSystem entry; look for getHTTPResponse in repos.list-commits"
    warm = tokenize(text)
    clear_caches()
    assert tokenize(text) == warm
    assert tokenize(text) == warm

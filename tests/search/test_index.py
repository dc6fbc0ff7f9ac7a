"""ToolIndex ranks tools for natural-language queries, safely and deterministically."""

from __future__ import annotations

import dataclasses

import pytest

from codemode.search import SearchDocument, SearchHit, ToolIndex


def doc(
    key: str, description: str = "", *, title: str | None = None, params: tuple[tuple[str, str], ...] = ()
) -> SearchDocument:
    server, _, name = key.partition("/")
    return SearchDocument(
        key=key, server=server, name=name, title=title, description=description, parameters=params
    )


CATALOG: tuple[SearchDocument, ...] = (
    doc("crm/get_customer", "Fetch one customer record by id.", params=(("customer_id", "Customer id"),)),
    doc("crm/list_customers", "List customers, newest first.", params=(("limit", "Maximum results"),)),
    doc("crm/create_customer", "Create a customer with a name and email."),
    doc("crm/delete_customer", "Permanently remove a customer."),
    doc("github/list_issues", "List issues in a repository.", params=(("state", "open or closed"),)),
    doc("github/repos.list-commits", "List commits on a branch of a repository."),
    doc("jira/list_issues", "List issues in a project.", params=(("projectKey", "Project key"),)),
    doc("jira/transition_issue", "Move an issue through its workflow, for example to Done."),
    doc("calendar/createEvent", "Create an event on a calendar.", title="Create event"),
    doc(
        "time/get_current_time",
        "Current time.",
        params=(("timezone", "IANA time zone such as Europe/Paris"),),
    ),
    doc("mail/send_email", "Send an email to recipients.", params=(("bcc", "Blind carbon copy recipients"),)),
)


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    return ToolIndex.build(CATALOG)


def keys(hits: list[SearchHit]) -> list[str]:
    return [hit.key for hit in hits]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("get_customer", "crm/get_customer"),
        ("repos.list-commits", "github/repos.list-commits"),
        ("createEvent", "calendar/createEvent"),
        ("transition_issue", "jira/transition_issue"),
        ("Get Customer", "crm/get_customer"),
        ("jira/list_issues", "jira/list_issues"),
    ],
)
def test_an_exact_tool_name_query_ranks_that_tool_first(index: ToolIndex, query: str, expected: str) -> None:
    assert keys(index.search(query, k=3))[0] == expected


def test_an_exact_name_beats_a_tool_that_only_mentions_the_words_often() -> None:
    spammy = doc("x/helper", "get customer " * 50, title="get customer get customer")
    idx = ToolIndex.build([spammy, *CATALOG])
    assert keys(idx.search("get_customer", k=1)) == ["crm/get_customer"]


def test_parameter_names_are_searchable(index: ToolIndex) -> None:
    assert keys(index.search("bcc", k=1)) == ["mail/send_email"]
    assert keys(index.search("project key", k=1)) == ["jira/list_issues"]


def test_parameter_descriptions_are_searchable(index: ToolIndex) -> None:
    assert keys(index.search("Europe/Paris", k=1)) == ["time/get_current_time"]


def test_naming_the_server_prefers_its_tools(index: ToolIndex) -> None:
    assert keys(index.search("list the jira issues", k=1)) == ["jira/list_issues"]
    assert keys(index.search("list the github issues", k=1)) == ["github/list_issues"]


def test_synonyms_of_tool_verbs_match(index: ToolIndex) -> None:
    assert keys(index.search("retrieve a customer", k=1)) == ["crm/get_customer"]
    assert keys(index.search("erase a customer", k=1)) == ["crm/delete_customer"]
    assert keys(index.search("add a new client", k=1)) == ["crm/create_customer"]
    assert keys(index.search("schedule a meeting", k=1)) == ["calendar/createEvent"]


def test_word_forms_match_through_stemming(index: ToolIndex) -> None:
    assert keys(index.search("customers deleted permanently", k=1)) == ["crm/delete_customer"]


def test_an_unknown_word_matches_longer_indexed_words_by_prefix() -> None:
    idx = ToolIndex.build([doc("a/x", "Manage kubeconfigs."), doc("a/y", "Manage clusters.")])
    assert keys(idx.search("kubecon", k=1)) == ["a/x"]


def test_a_one_megabyte_hostile_description_neither_crashes_nor_dominates() -> None:
    vocabulary = " ".join(word for d in CATALOG for word in f"{d.name} {d.description}".split())
    hostile_text = (vocabulary + " ") * (1_000_000 // (len(vocabulary) + 1) + 1)
    assert len(hostile_text) >= 1_000_000
    hostile = doc(
        "evil/everything", hostile_text, title="x" * 100_000, params=(("p" * 100_000, hostile_text),) * 500
    )
    idx = ToolIndex.build([*CATALOG, hostile])
    assert len(idx) == len(CATALOG) + 1
    for query, expected in [
        ("fetch one customer", "crm/get_customer"),
        ("send an email", "mail/send_email"),
        ("move the issue to done", "jira/transition_issue"),
        ("commits on a branch", "github/repos.list-commits"),
    ]:
        assert keys(idx.search(query, k=1)) == [expected], query


def test_text_beyond_the_description_cap_is_not_indexed() -> None:
    visible = doc("a/visible", "zebra")
    hidden = doc("a/hidden", "x " * 10_000 + "zebra")
    assert keys(ToolIndex.build([visible, hidden]).search("zebra")) == ["a/visible"]


def test_k_bounds_the_number_of_hits(index: ToolIndex) -> None:
    assert len(index.search("customer", k=2)) == 2
    assert len(index.search("customer", k=1)) == 1
    assert index.search("customer", k=0) == []
    assert index.search("customer", k=-3) == []
    assert len(index.search("customer", k=1000)) == 4  # only the matching tools, never padding


def test_default_k_is_five(index: ToolIndex) -> None:
    assert len(index.search("list issues customer event email time commits")) == 5


def test_hits_are_ordered_best_first(index: ToolIndex) -> None:
    hits = index.search("list issues", k=10)
    assert hits
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)


def test_an_empty_index_finds_nothing() -> None:
    idx = ToolIndex.build([])
    assert len(idx) == 0
    assert idx.search("anything") == []


@pytest.mark.parametrize("query", ["", "   ", "the of and", "!!!", "zzzzqqq"])
def test_an_empty_or_unmatched_query_finds_nothing(index: ToolIndex, query: str) -> None:
    assert index.search(query) == []


def test_a_huge_query_is_cut_rather_than_slowing_search(index: ToolIndex) -> None:
    assert index.search("customer " * 100_000, k=1)[0].key.startswith("crm/")


def test_results_are_deterministic_and_ties_keep_the_input_order() -> None:
    twins = [doc(f"s{i}/tool_{i}", "List things.") for i in range(6)]
    first = ToolIndex.build(twins).search("list things", k=6)
    assert keys(first) == [d.key for d in twins]
    assert len({h.score for h in first}) == 1
    assert ToolIndex.build(twins).search("list things", k=6) == first
    reversed_twins = twins[::-1]
    assert keys(ToolIndex.build(reversed_twins).search("list things", k=6)) == [d.key for d in reversed_twins]


def test_copies_of_one_tool_name_make_room_for_other_tools() -> None:
    # Six servers offer one tool; another tool matches a little less well (a longer description).
    text = "List things kept in the old archive, sorted by date, size, owner and kind"
    copies = [doc(f"s{i}/fetch_rows", f"{text}.") for i in range(6)]
    other = doc("t/get_rows", f"{text} of file.")
    hits = ToolIndex.build([*copies, other]).search("list things", k=5)
    assert keys(hits) == ["s0/fetch_rows", "t/get_rows", "s1/fetch_rows", "s2/fetch_rows", "s3/fetch_rows"]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert ToolIndex.build([*copies, other]).search("list things", k=5) == hits
    assert (
        ToolIndex.from_bytes(ToolIndex.build([*copies, other]).to_bytes()).search("list things", k=5) == hits
    )
    # Only the first copy scores in full; the others keep their order. Case and punctuation do not count.
    alone = ToolIndex.build(copies).search("list things", k=6)
    assert keys(alone) == [d.key for d in copies]
    assert alone[0].score > alone[1].score == alone[5].score
    cased = ToolIndex.build([doc("a/Fetch-Rows", "List things."), doc("b/fetch_rows", "List things.")])
    first, second = cased.search("list things", k=2)
    assert first.key == "a/Fetch-Rows"
    assert first.score > second.score


def test_many_copies_do_not_hide_the_next_tool() -> None:
    # More copies than the first candidates the ranking looks at: it must look further to be exact.
    text = "List things kept in the old archive, sorted by date, size, owner and kind"
    copies = [doc(f"s{i:02}/fetch_rows", f"{text}.") for i in range(40)]
    hits = ToolIndex.build([*copies, doc("t/get_rows", f"{text} of file.")]).search("list things", k=3)
    assert keys(hits) == ["s00/fetch_rows", "t/get_rows", "s01/fetch_rows"]


def test_rebuilding_gives_identical_scores() -> None:
    a = ToolIndex.build(CATALOG).search("list customer issues", k=10)
    b = ToolIndex.build(list(CATALOG)).search("list customer issues", k=10)
    assert a == b


def test_duplicate_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="crm/get_customer"):
        ToolIndex.build([CATALOG[0], CATALOG[0]])


def test_len_counts_the_indexed_tools(index: ToolIndex) -> None:
    assert len(index) == len(CATALOG)


def test_documents_and_hits_are_immutable_values() -> None:
    hit = SearchHit("a/b", 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.score = 2.0  # type: ignore[misc]
    assert SearchHit("a/b", 1.0) == hit
    assert CATALOG[0] == doc(
        "crm/get_customer", "Fetch one customer record by id.", params=(("customer_id", "Customer id"),)
    )
    assert not hasattr(hit, "__dict__")


def test_output_fields_are_searchable_but_weigh_less_than_the_description() -> None:
    returns_iban = SearchDocument(
        "bank/get_account", "bank", "get_account", None, "Fetch an account.", outputs=(("iban", "The IBAN"),)
    )
    describes_iban = SearchDocument("bank/validate", "bank", "validate", None, "Check that an IBAN is valid.")
    plain = SearchDocument("bank/list_accounts", "bank", "list_accounts", None, "List accounts.")
    index = ToolIndex.build([plain, returns_iban, describes_iban])
    assert keys(index.search("iban", k=5)) == ["bank/validate", "bank/get_account"]

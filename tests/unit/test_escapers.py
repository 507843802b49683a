"""The escapers templates put inventory strings through (vllm_fleet/render.py, as filters in
filter_plugins/fleet.py): a hostile value rendered and read back as its format reads it is the
value itself, or the escaper refuses it."""

from __future__ import annotations

import shlex

import pytest
from ansible.errors import AnsibleFilterError

from filter_plugins.fleet import FilterModule
from vllm_fleet import render

FILTERS = FilterModule().filters()
HOSTILE = ["0.0.0.0 backup", "a#b", "${HOME}", "$(id)", "100%", "it's", 'say "hi"', "back\\slash", "a;b",
           "", "  ", "é", "a\tb", "x\ny", "end\\", "line\r", "nul\x00"]
PLAIN = ["0.0.0.0", "::", "[::1]:9000", "1.17.4-1~ubuntu22.04", "192.0.2.7:8000", "/var/lib/prometheus/node-exporter",
         "10m", "vllm", "model_qwen3-0.6b", "leastconn", "0660", "1.5"]
CONTROL = ("\n", "\r", "\t", "\x00")


def haproxy_read(line: str) -> list[str]:
    """HAProxy's reading of the quoting haproxy_quote writes (single quotes: literal; a
    backslash outside quotes: the next character literally), which is POSIX shell's for it."""
    return shlex.split(line, comments=True, posix=True)


@pytest.mark.parametrize("value", PLAIN + HOSTILE)
def test_haproxy_quote_reads_back_as_one_word_or_is_refused(value):
    if any(c in value for c in CONTROL):
        with pytest.raises(ValueError, match="control character"):
            render.haproxy_quote(value)
        with pytest.raises(AnsibleFilterError, match="^haproxy_quote: "):
            FILTERS["haproxy_quote"](value)
        return
    word = render.haproxy_quote(value)
    assert haproxy_read(f"bind {word} # a comment") == ["bind", value]
    assert FILTERS["haproxy_quote"](value) == word


def test_haproxy_quote_leaves_plain_words_as_they_are():
    assert [render.haproxy_quote(v) for v in PLAIN] == PLAIN
    # Inside single quotes HAProxy expands no variable and ends no line at `#`.
    assert render.haproxy_quote("${HOME}#x") == "'${HOME}#x'"
    assert render.haproxy_quote("it's") == "'it'\\''s'"


@pytest.mark.parametrize("value", PLAIN + HOSTILE)
def test_plain_word_passes_plain_words_unchanged_and_refuses_the_rest(value):
    if value in PLAIN:
        assert render.plain_word(value) == FILTERS["plain_word"](value) == value
        return
    with pytest.raises(ValueError, match="not one plain word"):
        render.plain_word(value)
    with pytest.raises(AnsibleFilterError, match="^plain_word: "):
        FILTERS["plain_word"](value)


@pytest.mark.parametrize("value", PLAIN + HOSTILE + ["vLLM serving qwen (50% of a GPU)", "%n %i"])
def test_systemd_text_doubles_specifiers_and_refuses_line_breakers(value):
    if any(c in value for c in CONTROL) or value.endswith("\\"):
        with pytest.raises(ValueError, match="cannot carry"):
            render.systemd_text(value)
        with pytest.raises(AnsibleFilterError, match="^systemd_text: "):
            FILTERS["systemd_text"](value)
        return
    text = render.systemd_text(value)
    assert "\n" not in text
    # systemd resolves %% to %, and no other specifier is left in the text.
    assert text.replace("%%", "").count("%") == 0
    assert text.replace("%%", "%") == value


@pytest.mark.parametrize("value", PLAIN + HOSTILE + ["https://user:p%40ss@mirror.example/simple?x=1&y=$z"])
def test_single_word_keeps_urls_whole_and_refuses_spaces_and_line_breaks(value):
    if not value or any(c.isspace() or ord(c) < 32 for c in value):
        with pytest.raises(AnsibleFilterError, match="^single_word: "):
            FILTERS["single_word"](value)
        return
    assert render.single_word(value) == FILTERS["single_word"](value) == value
    # One field of a line split on spaces, as deb822 and pip.conf lists are.
    assert f"URIs: {value} other".split() == ["URIs:", value, "other"]

"""The _json-only codec agrees with the json module on valid input and locates errors precisely."""
import json

import pytest
from hypothesis import given, strategies as st

from skb.cni import jsonio

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children), max_leaves=30)


@given(values)
def test_roundtrip_matches_json(v):
    text = json.dumps(v)
    assert jsonio.loads(text) == json.loads(text)
    assert json.loads(jsonio.dumps(v)) == v


@given(st.text(max_size=60))
def test_arbitrary_text_decodes_or_raises_located_error(text):
    try:
        jsonio.loads(text)
    except jsonio.JSONSyntaxError as e:
        assert e.line >= 1 and e.col >= 1 and isinstance(e.describe(), str)


@pytest.mark.parametrize("text,problem,line,col", [
    ('{\n  "name": "x",\n  "type": "loopback",\n}', "trailing comma after the last key", 3, 21),
    ('{"a": [1, 2,]}', "trailing comma after the last list item", 1, 12),
    ('', "unexpected end of input", 1, 1),
    ('{"a": NaN}', "NaN is not valid JSON", 1, 7),
    ('{"a": 1} {}', "extra data", 1, 10),
    ('{"a": "x', "unterminated string", 1, 7),
    ('[1e400]', "out of range", 1, 2),
    ('{"a": 1 , \n }', "trailing comma after the last key", 1, 9),
    ('[1, ]', "trailing comma after the last list item", 1, 3),
    ('{"a": [1,],}', "trailing comma after the last list item", 1, 9),
    ('{"a": {"b": "x,}"},}', "trailing comma after the last key", 1, 19),
    ('{"a": 1,', "unexpected end of input", 1, 9),
    ('{"a": 1,]', "expecting property name", 1, 9),    # a mismatched bracket, not a trailing comma
    ('{,}', "expecting property name", 1, 2),
    ('[1,,2]', "expecting value", 1, 4),
    ('{"a": "x\\"}', "unterminated string", 1, 7),
    ('{\n  // the pod network\n  "name": "x"\n}', "a comment (JSON allows none", 2, 3),   # review 15
    ('{"a": 1, /* why */ "b": 2}', "a comment (JSON allows none", 1, 10),
    ('[1, # two\n 2]', "a comment (JSON allows none", 1, 5),
])
def test_errors_are_located(text, problem, line, col):
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(text)
    e = ei.value
    assert problem in str(e) and (e.line, e.col) == (line, col)
    assert e.describe().splitlines()[1].index("^") == col - 1


def test_bytes_and_invalid_utf8():
    assert jsonio.loads(b'{"a": "\xc3\xa9"}') == {"a": "é"}
    with pytest.raises(jsonio.JSONSyntaxError, match="UTF-8"):
        jsonio.loads(b'{"a": "\xff"}')


# issue 13, class 1: no valid JSON text makes reading or writing raise

@pytest.mark.parametrize("text,expected", [
    ('"\\ud800"', "\ufffd"),                      # lone high surrogate: U+FFFD, as Go's decoder
    ('"\\udfff"', "\ufffd"),                      # lone low surrogate
    ('"a\\ud800\\u0041"', "a\ufffdA"),            # high surrogate followed by a non-surrogate
    ('"\\ud83d\\ude00"', "\U0001F600"),           # a proper pair stays one character
    ('{"\\ud800": ["\\uDC00"]}', {"\ufffd": ["\ufffd"]}),   # keys too, upper-case escapes too
])
def test_lone_surrogates_decode_to_u_fffd(text, expected):
    assert jsonio.loads(text) == expected
    assert jsonio.loads(text.encode()) == expected
    jsonio.dumps(jsonio.loads(text)).encode("utf-8")


def test_dumps_never_yields_unencodable_text():
    s = jsonio.dumps({"a": "\ud800", "b": "x\udcff", "\udc80": ["é"]})
    assert s.encode("utf-8") and json.loads(s) == {"a": "\ufffd", "b": "x\ufffd", "\ufffd": ["é"]}


@given(st.text(st.characters(exclude_categories=()), max_size=20))
def test_any_python_string_round_trips_through_json_text(s):
    text = json.dumps(s)                           # escapes surrogates: valid JSON text
    got = jsonio.loads(text)
    # what the standard decoder reads (an escaped surrogate pair is one character), except that a lone
    # surrogate becomes U+FFFD, as in Go's decoder
    assert got == "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in json.loads(text))
    assert json.loads(jsonio.dumps(got).encode("utf-8")) == got


@pytest.mark.parametrize("digits", [4301, 5000, 100000])
def test_very_long_integers_are_a_located_error(digits):
    text = '{"a": 1,\n "mtu": -%s}' % ("9" * digits)
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(text)
    e = ei.value
    assert "number too long" in str(e) and (e.line, e.col) == (2, 9)


def test_long_integers_within_the_limit_are_numbers():
    assert jsonio.loads("[%s]" % ("9" * 4300)) == [int("9" * 4300)]
    assert jsonio.loads("[0.%s]" % ("9" * 5000)) == [1.0]   # a float literal has no digit limit


@pytest.mark.parametrize("text,pos,found", [
    # Python <= 3.12 reports a trailing comma where the next key or value was expected, 3.13 at the comma:
    # both positions give the same diagnosis.
    ('{"a": 1,}', 8, ("key", 7)), ('{"a": 1,}', 7, ("key", 7)),
    ('[1, 2 ,\n]', 8, ("list item", 6)), ('[1, 2 ,\n]', 6, ("list item", 6)),
    ('[1,,2]', 3, None), ('{"a": 1,]', 8, None), ('{"a": 1, "b"}', 9, None),
])
def test_trailing_comma_at_either_position(text, pos, found):
    assert jsonio._trailing_comma(text, pos) == found


def test_a_repeated_key_stands_at_its_last_place_as_go_reads_it():
    """Go decodes an object's keys in document order, so of two spellings of a field the last wins; a
    plain dict would keep a repeated key at its first place and turn {"a":1,"A":2,"a":3} into a then A."""
    assert list(jsonio.loads('{"a": 1, "A": 2, "a": 3}').items()) == [("A", 2), ("a", 3)]
    assert list(jsonio.loads('{"x": {"k": 1, "K": 2, "k": 3, "z": 0}}')["x"].items()) == [("K", 2), ("k", 3), ("z", 0)]
    assert list(jsonio.loads('{"b": 1, "a": 2}').items()) == [("b", 1), ("a", 2)]


# exact messages and locations (line, column, the line shown)

TRAILING_ITEM = "trailing comma after the last list item (JSON allows none)"
TRAILING_KEY = "trailing comma after the last key (JSON allows none)"
CUT = "unexpected end of input: the JSON is empty or cut short"
UNTERMINATED = "unterminated string (a missing closing quote?)"


@pytest.mark.parametrize("text,problem,line,col,snippet", [
    ("[1,]", TRAILING_ITEM, 1, 3, "[1,]"),
    ('{"a":1,}', TRAILING_KEY, 1, 7, '{"a":1,}'),
    ('{"a": 1 ,\n }', TRAILING_KEY, 1, 9, '{"a": 1 ,'),
    ("[1,\r\n]", TRAILING_ITEM, 1, 3, "[1,"),
    ("  [1,]", TRAILING_ITEM, 1, 5, "  [1,]"),
    ("[1\n,\n2,\n]", TRAILING_ITEM, 3, 2, "2,"),
    ('{"a":[1,],"b":2}', TRAILING_ITEM, 1, 8, '{"a":[1,],"b":2}'),
    ('{"a": "[", }', TRAILING_KEY, 1, 10, '{"a": "[", }'),
    ('{"a": "x\\"[", }', TRAILING_KEY, 1, 13, '{"a": "x\\"[", }'),
    ('{"a":\n "abc', UNTERMINATED, 2, 2, ' "abc'),
    ('{"a": "a\\"b', UNTERMINATED, 1, 7, '{"a": "a\\"b'),
    ('"abc', UNTERMINATED, 1, 1, '"abc'),
    ('{"a": "ab" x}', "expecting ',' delimiter", 1, 12, '{"a": "ab" x}'),
    ('{"a" 1}', "expecting ':' delimiter", 1, 6, '{"a" 1}'),
    ("\ufeff{}", "unexpected byte order mark", 1, 1, "\ufeff{}"),
    ("[1e999, 1e999]", "number 1e999 is out of range", 1, 2, "[1e999, 1e999]"),
    ("", CUT, 1, 1, ""), ("   ", CUT, 1, 4, "   "), ("{", CUT, 1, 2, "{"),
    ("[1] [2]", "extra data after the JSON value", 1, 5, "[1] [2]"),
    ('{"a":1}\n\n  x', "extra data after the JSON value", 3, 3, "  x"),
    ("[NaN]", "NaN is not valid JSON", 1, 2, "[NaN]"),
    ("{,}", "expecting property name enclosed in double quotes", 1, 2, "{,}"),
    ("[,]", "expecting value", 1, 2, "[,]"), (",", "expecting value", 1, 1, ","), (" ,]", "expecting value", 1, 2, " ,]"),
    ("tru", "expecting value", 1, 1, "tru"),
])
def test_syntax_errors_are_located_exactly(text, problem, line, col, snippet):
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(text)
    e = ei.value
    assert (e.problem, e.line, e.col, e.snippet, str(e)) == (problem, line, col, snippet,
                                                             f"{problem} at line {line}, column {col}")
    assert e.describe() == f"{snippet}\n{' ' * (col - 1)}^"


def test_an_invalid_utf8_byte_is_located():
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(b'{"a":\n "\xff"}')
    assert (ei.value.problem, ei.value.line, ei.value.col) == ("invalid UTF-8 byte", 2, 3)


@pytest.mark.parametrize("length", [100, 101, 300])
def test_describe_shows_a_window_of_a_long_line(length):
    text = '{"k": "' + "x" * (length - 11) + '", }'
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(text)
    e = ei.value
    assert len(text) == length and e.col == length - 2
    col = e.col - 1
    if length <= 100:
        assert e.describe() == f"{text}\n{' ' * col}^"
    else:
        lo = col - 50
        assert e.describe() == f"...{text[lo:lo + 100]}\n{' ' * (col - lo + 3)}^"


def test_describe_near_the_start_of_a_long_line_needs_no_ellipsis():
    text = "[,]" + " " * 200
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(text)
    assert ei.value.describe() == f"{text[:100]}\n ^"


@pytest.mark.parametrize("data,want", [(b'{"a":"\\uD800"}', {"a": "\ufffd"}), (b'["\\ud800x"]', ["\ufffdx"]),
                                       ('["\ud800"]', ["\ufffd"]), ('["\\uD800"]', ["\ufffd"]), ('{"\\udfff": 1}', {"\ufffd": 1}),
                                       ("1", 1), (" \t\n\r1 ", 1), ('"\\ud83d\\ude00"', "\U0001f600")])
def test_lone_surrogates_become_the_replacement_character_and_whitespace_is_skipped(data, want):
    assert jsonio.loads(data) == want


def test_numbers_at_the_digit_limit():
    big = "1" * 4300
    assert jsonio.loads(f"[-{big}]") == [-int(big)]
    for text, col in ((f"[{big}, {big}1]", 4304), (f"[1.5, {big}1]", 7), (f'{{"a": [{big}1]}}', 8)):
        with pytest.raises(jsonio.JSONSyntaxError) as ei:
            jsonio.loads(text)
        assert (ei.value.problem, ei.value.col) == ("number too long (4301 digits; at most 4300)", col)


def test_numbers_beyond_a_lower_interpreter_limit(monkeypatch):
    import sys
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(1000)
    try:
        with pytest.raises(jsonio.JSONSyntaxError) as ei:
            jsonio.loads("[1, " + "2" * 1001 + "]")
    finally:
        sys.set_int_max_str_digits(old)
    assert (ei.value.problem, ei.value.col) == ("number too long (1001 digits)", 5)


def test_nesting_too_deep_is_located_at_the_start():
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads("  " + "[" * 100000)
    assert (ei.value.problem, ei.value.line, ei.value.col) == (jsonio.TOO_DEEP, 1, 3)


@pytest.mark.parametrize("text,problem,line,col,snippet", [
    ('{"ab[": 1, }', TRAILING_KEY, 1, 10, '{"ab[": 1, }'),          # a bracket inside a key
    ('{"a\\"": [1, ]}', TRAILING_ITEM, 1, 11, '{"a\\"": [1, ]}'),      # an escaped quote ending a key
    ('{"": 1, }', TRAILING_KEY, 1, 7, '{"": 1, }'),                 # an empty key
    ("[1 ,]", TRAILING_ITEM, 1, 4, "[1 ,]"), ("[[1] ,]", TRAILING_ITEM, 1, 6, "[[1] ,]"),
    ('{"a": "\\"abc', UNTERMINATED, 1, 7, '{"a": "\\"abc'),
    ('{"a": 1 "b": 2}', "expecting ',' delimiter", 1, 9, '{"a": 1 "b": 2}'),
    ('{"a": 1 "\\"": 2}', "expecting ',' delimiter", 1, 9, '{"a": 1 "\\"": 2}'),
    ("\n[1,]", TRAILING_ITEM, 2, 3, "[1,]"), ("[1,\n]\n\n", TRAILING_ITEM, 1, 3, "[1,"),
    ("[1,]X", TRAILING_ITEM, 1, 3, "[1,]X"), ("   [1,]", TRAILING_ITEM, 1, 6, "   [1,]"),
    ("1, ]", "extra data after the JSON value", 1, 2, "1, ]"),
])
def test_more_syntax_errors_located_exactly(text, problem, line, col, snippet):
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(text)
    e = ei.value
    assert (e.problem, e.line, e.col, e.snippet, e.pos) == (problem, line, col, snippet, text.index(snippet) + col - 1)


def test_one_value_after_odd_whitespace():
    assert jsonio.loads(" 1") == 1 and jsonio.loads("\n\n\t[]") == []


def test_the_first_of_two_identical_too_long_numbers_is_named_and_a_negative_one_at_the_limit_is_taken():
    big = "1" * 4301
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(f"[{big}, {big}]")
    assert ei.value.col == 2
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads(f"[-{'1' * 4300}, {big}]")
    assert (ei.value.problem, ei.value.col) == ("number too long (4301 digits; at most 4300)", 4305)


@pytest.mark.parametrize("depth", [300, 600, 990, 5000])
def test_deep_nesting_is_read_or_refused_as_too_deep_never_a_crash(depth):
    """The C scanner and the replacement of lone surrogates each have their depth limit (the interpreter's);
    whichever is reached first, the answer is "nesting too deep" at the start, never a RecursionError."""
    text = "  " + "[" * depth + '"\\ud800"' + "]" * depth
    try:
        value = jsonio.loads(text)
    except jsonio.JSONSyntaxError as e:
        assert (e.problem, e.line, e.col) == (jsonio.TOO_DEEP, 1, 3)
    else:
        for _ in range(depth):
            assert len(value) == 1
            value = value[0]
        assert value == "\ufffd"


def test_a_syntax_error_is_explained_when_json_was_never_imported():
    """A plugin's call path never imports json: the C scanner then fails without an exception (a
    SystemError) and the error is explained from the text all the same, as in a process that has json."""
    import os
    import subprocess
    import sys
    code = ("import sys\nfrom skb.cni import jsonio\nbefore = 'json.decoder' in sys.modules\n"
            "try:\n    jsonio.loads('{\"a\": 1,\\n \"b\": [1,]}')\nexcept jsonio.JSONSyntaxError as e:\n"
            "    print(before, 'mutmut' in sys.modules, repr((e.problem, e.line, e.col)))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True).stdout
    before, instrumented, got = out.split(" ", 2)
    assert before == "False" or instrumented == "True"        # (mutation testing's instrumentation loads json)
    assert got.strip() == repr((TRAILING_ITEM, 2, 9))


def test_an_empty_key_before_an_open_list():
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads('{"": [1, ]}')
    assert (ei.value.problem, ei.value.col) == (TRAILING_ITEM, 8)


def test_a_syntax_error_is_explained_when_json_decoder_is_not_loaded(monkeypatch):
    """In-process, the same case as a plugin's call path: without json.decoder in sys.modules, Python 3.11's
    C scanner fails without an exception (later versions import the module themselves); the answer is the same."""
    import sys
    monkeypatch.delitem(sys.modules, "json.decoder")
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads('  {"a": 1,\n "b": [1,]}')
    assert (ei.value.problem, ei.value.line, ei.value.col) == (TRAILING_ITEM, 2, 9)


def test_the_scanner_context_applies_gos_rules():
    """The context every scanner of this module is built from (the module's own and the one that locates a
    number too long): control characters refused in strings, NaN refused, the last of repeated keys at
    its last place, integers as int."""
    import _json
    scan = _json.make_scanner(jsonio._ScanContext())
    assert scan('{"a": 1, "b": 2, "a": 3}', 0) == ({"b": 2, "a": 3}, 24)
    assert list(scan('{"a": 1, "b": 2, "a": 3}', 0)[0]) == ["b", "a"]
    assert scan("[12, 1.5]", 0) == ([12, 1.5], 9) and type(scan("7", 0)[0]) is int
    with pytest.raises(ValueError):
        scan('["a\x01"]', 0)
    with pytest.raises(ValueError):
        scan("[NaN]", 0)


def test_a_control_character_in_a_string_is_named_once_with_the_fix():
    """Review 16: "invalid control character at at line 1, column 31" (the decoder's wording ends in "at")."""
    with pytest.raises(jsonio.JSONSyntaxError) as ei:
        jsonio.loads('{"name": "a\x1bb"}')
    assert str(ei.value) == ("invalid control character in a string (write it escaped, e.g. \\n, \\t or \\u001b) "
                             "at line 1, column 12"), str(ei.value)

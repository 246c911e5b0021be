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

"""JAAS configuration text as sasl.jaas.config holds it."""

import pytest

from protocol.jaas import PLAIN_LOGIN_MODULE, JaasConfigError, parse_jaas_config


def test_a_plain_login_module_line_gives_its_options_in_order():
    [entry] = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
    )
    assert entry.login_module == PLAIN_LOGIN_MODULE
    assert entry.flag == "required"
    assert list(entry.options.items()) == [
        ("username", "admin"), ("password", "admin-secret"), ("user_admin", "admin-secret"), ("user_alice", "alice-secret"),
    ]


def test_quotes_escapes_bare_words_and_comments():
    [entry] = parse_jaas_config(
        "/* a comment */ Module OPTIONAL a='single \"quoted\"' b=\"with \\\"escape\\\" and ;\" c=bare.word-1 // trailing\n;"
    )
    assert entry.flag == "optional"
    assert entry.options == {"a": 'single "quoted"', "b": 'with "escape" and ;', "c": "bare.word-1"}


def test_several_entries_are_kept_apart():
    entries = parse_jaas_config("A required; B sufficient x=\"1\";")
    assert [(e.login_module, e.options) for e in entries] == [("A", {}), ("B", {"x": "1"})]


@pytest.mark.parametrize(
    "text, error",
    [
        ("Module required", "not terminated by semi-colon"),
        ("Module always;", "Invalid login module control flag 'always'"),
        ('Module required user=;', "Value not specified for key 'user'"),
        ('Module required user="open;', "Unterminated quoted string"),
        ("Module;", "control flag not specified"),
    ],
)
def test_malformed_text_is_refused(text, error):
    with pytest.raises(JaasConfigError, match=error):
        parse_jaas_config(text)

import pytest

from broker.session import ANONYMOUS, KafkaPrincipal, Session


def test_a_principal_reads_and_prints_as_type_colon_name():
    assert KafkaPrincipal.parse("User:alice") == KafkaPrincipal("User", "alice")
    assert str(KafkaPrincipal.parse("User:CN=a,O=b:c")) == "User:CN=a,O=b:c"


@pytest.mark.parametrize("text", ["alice", ":alice", "User:"])
def test_a_principal_without_type_or_name_is_refused(text):
    with pytest.raises(ValueError, match="<type>:<name>"):
        KafkaPrincipal.parse(text)


def test_a_new_session_is_anonymous_plaintext_and_knows_its_client_host():
    session = Session("::1:50000", "PLAINTEXT")
    assert session.principal == ANONYMOUS
    assert str(session.principal) == "User:ANONYMOUS"
    assert session.security_protocol == "PLAINTEXT"
    assert session.client_host == "::1"

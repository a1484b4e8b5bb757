"""The contracts' shared pieces: a plugin's state in the store, under its name."""

from hetflow.core.policies.contracts import PolicyStore


def test_a_plugins_state_is_made_once_under_its_key_and_kept_apart_from_anothers():
    store = PolicyStore()
    made: list[str] = []

    def ledger() -> dict[str, int]:
        made.append("ledger")
        return {}

    store.state_of("program-admission", ledger)["m"] = 3
    assert store.state_of("program-admission", ledger) == {"m": 3} and made == ["ledger"]
    assert store.state_of("spread-prefix-affinity", list) == []
    assert set(store.plugin_state) == {"program-admission", "spread-prefix-affinity"}


import pytest


@pytest.fixture(autouse=True)
def _private_home(tmp_path, monkeypatch):
    """Never touch the real ~/.config/isolde or history."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("ISOLDE_DEBUG", raising=False)

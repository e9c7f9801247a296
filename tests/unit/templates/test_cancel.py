"""A stream msnb's front ended early, told to the TorchServe worker that runs its generator (msnb_runtime.handler.cancel): only the
request whose id the front marked, once, and nothing where the server gives no folder or the id is not one."""

from __future__ import annotations

from msnb.templates.msnb_runtime.handler.cancel import CANCEL_DIR_VAR, CANCEL_HEADER, Cancels, mark, new_id


class Context:
    """A TorchServe context's request headers, by batch index."""

    def __init__(self, headers: dict[int, str]):
        self.headers = headers

    def get_request_header(self, idx: int, key: str) -> str | None:
        return self.headers.get(idx) if key == CANCEL_HEADER else None


def test_only_the_marked_stream_ends_once_and_its_mark_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv(CANCEL_DIR_VAR, str(tmp_path))
    ids = [new_id(), new_id()]
    cancels = Cancels(Context({0: ids[0], 1: ids[1], 2: "../../etc/passwd"}), [0, 1, 2, 3])
    assert cancels.ended([0, 1, 2, 3]) == set()
    mark(tmp_path, ids[1])
    mark(tmp_path, "../outside")  # not an id: nothing is written
    assert [p.name for p in tmp_path.iterdir()] == [ids[1]]
    assert cancels.ended([0, 1, 2, 3]) == {1} and not any(tmp_path.iterdir())
    assert cancels.ended([0, 1]) == set()


def test_without_the_servers_folder_nothing_ends(tmp_path, monkeypatch):
    monkeypatch.delenv(CANCEL_DIR_VAR, raising=False)
    stream_id = new_id()
    cancels = Cancels(Context({0: stream_id}), [0])
    mark(tmp_path, stream_id)
    assert cancels.ended([0]) == set()
    mark(None, stream_id)  # a front without a folder marks nothing
    mark(tmp_path / "gone", new_id())  # a server that is stopping: no error

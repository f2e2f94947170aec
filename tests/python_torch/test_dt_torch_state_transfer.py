"""The state a node copies from a peer under `in_place` (templates/job/dt_torch.py's transport):
loaded as tensors and plain values only (torch.load's weights_only), and only from the host the
quorum named as the source. A peer that serves anything else (a pickle that runs code, a
checkpoint on another host) is refused before it can act. Runs with PyTorch's virtualenv, over
real HTTP on loopback."""
import io
import os

os.environ.setdefault("RUST_LOG", "warn")
import tempfile
import threading
import unittest
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import torch
from torch.distributed._serialization import _streaming_save

from test_dt_torch_fixtures import load_dt_torch

TIMEOUT = timedelta(seconds=10)


class Planted:
    """What a hostile peer puts in the state: unpickling it runs a program."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class Peer:
    """A node's checkpoint server as a hostile peer runs it: serves `body` at any path."""

    def __init__(self, body):
        buf = io.BytesIO()
        _streaming_save(body, buf)
        payload, self.asked = buf.getvalue(), []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                peer.asked.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/checkpoint/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class StateTransferTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.planted = Path(self.dir.name) / "planted-ran"
        self.dt_torch = load_dt_torch()

    def tearDown(self):
        self.dir.cleanup()

    def transport(self, source):
        t = self.dt_torch._transport(TIMEOUT, "127.0.0.1", lambda: source)
        self.addCleanup(t.shutdown)
        return t

    def test_a_peer_serving_a_pickle_that_runs_code_is_refused_and_nothing_runs(self):
        peer = Peer({"user": {"default": Planted(self.planted)}, "torchft": {"step": 7}})
        self.addCleanup(peer.close)
        receiver = self.transport("http://127.0.0.1:1")
        with self.assertRaises(Exception) as caught:
            receiver.recv_checkpoint(src_rank=0, metadata=peer.url, step=7, timeout=TIMEOUT)
        self.assertEqual(peer.asked, ["/checkpoint/7/full"], "it did fetch the state")
        self.assertFalse(self.planted.exists(), "unpickling the peer's state ran its program")
        self.assertIn("weights_only", str(caught.exception))

    def test_a_checkpoint_on_another_host_than_the_source_is_not_fetched(self):
        peer = Peer({"user": {"default": {}}, "torchft": {"step": 7}})
        self.addCleanup(peer.close)
        receiver = self.transport("http://127.0.0.2:29600")
        with self.assertRaises(ValueError) as caught:
            receiver.recv_checkpoint(src_rank=0, metadata=peer.url, step=7, timeout=TIMEOUT)
        self.assertEqual(peer.asked, [])
        self.assertIn("127.0.0.2", str(caught.exception))
        for bad in ["file:///etc/passwd#", "http://127.0.0.2:1/elsewhere/", "http://u@127.0.0.2:1/checkpoint/"]:
            with self.assertRaises(ValueError, msg=bad):
                receiver.recv_checkpoint(src_rank=0, metadata=bad, step=7, timeout=TIMEOUT)

    def test_a_model_and_its_optimizers_state_arrive_whole(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
        body = {"user": {"default": {"model": model.state_dict(), "optimizer": opt.state_dict(),
                                     "more": {"epoch": 2, "name": "x", "rng": torch.get_rng_state()}}},
                "torchft": {"step": 7, "batches_committed": 7}}
        sender = self.transport("")
        sender.send_checkpoint(dst_ranks=[1], step=7, state_dict=body, timeout=TIMEOUT)
        receiver = self.transport(sender.address())
        got = receiver.recv_checkpoint(src_rank=0, metadata=sender.address(), step=7, timeout=TIMEOUT)
        self.assertEqual(got["torchft"], body["torchft"])
        mine = got["user"]["default"]
        for key, value in model.state_dict().items():
            self.assertTrue(torch.equal(mine["model"][key], value), key)
        self.assertEqual(mine["optimizer"]["param_groups"], opt.state_dict()["param_groups"])
        self.assertTrue(torch.equal(mine["optimizer"]["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]))
        self.assertEqual(mine["more"]["epoch"], 2)


if __name__ == "__main__":
    unittest.main()

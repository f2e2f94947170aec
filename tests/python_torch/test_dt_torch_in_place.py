"""dt_torch.InPlace (templates/job/dt_torch.py) with the real torchft: one node, its own Lighthouse
in this process, a few steps of a tiny model. What a node writes (the ack once the quorum is the
plan's nodes, the quorum in the progress file, read by dtd as tests/fixtures/protocol/
progress_in_place.json shows) and the arithmetic every node must agree on (the shard of the global
batch, the loss scale). Runs with PyTorch's virtualenv (scripts/test)."""
import json
import os

# torchft's Rust side logs every quorum at info; the test's own output is what matters.
os.environ.setdefault("RUST_LOG", "warn")
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import torch
from torch.distributed import TCPStore
from torchft._torchft import LighthouseServer

from test_dt_torch_fixtures import GOLDEN, load_dt_torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from free_port import free_port  # noqa: E402  (outside the ephemeral range: why there)


class InPlaceTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = Path(self.dir.name)
        self.lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1, join_timeout_ms=100)
        port = free_port()
        self.store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
        plan = self.tmp / "launch_plan"
        plan.write_text(json.dumps({"generation": 12, "hosts": ["127.0.0.1"]}))
        self.env = mock.patch.dict(os.environ, {
            "DT_IP": "127.0.0.1",
            "DT_STRATEGY": "in_place",
            "DT_GENERATION": "3",
            "DT_LAUNCH_PLAN": str(plan),
            "DT_ACK_FILE": str(self.tmp / "ack"),
            "DT_PROGRESS_FILE": str(self.tmp / "progress"),
            "DT_COLLECTIVE_TIMEOUT": "5",
            "TORCHFT_LIGHTHOUSE": self.lighthouse.address(),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "RUST_LOG": "warn",
        })
        self.env.start()

    def tearDown(self):
        self.env.stop()
        self.lighthouse.shutdown()
        self.dir.cleanup()

    def test_one_node_trains_acknowledges_the_plan_and_reports_its_quorum(self):
        dt_torch = load_dt_torch()
        session = dt_torch.Session()
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ft = session.in_place(model, opt, global_batch=10)
        x, y = torch.randn(10, 4), torch.randn(10, 1)
        for _ in range(3):
            ft.begin()
            idx = list(ft.shard())
            self.assertEqual(idx, list(range(10)), "one node: the whole global batch")
            self.assertAlmostEqual(ft.loss_scale, 0.1)
            loss = torch.nn.functional.mse_loss(ft.model(x[idx]), y[idx], reduction="sum") * ft.loss_scale
            loss.backward()
            self.assertTrue(ft.commit())
            session.progress(ft.step, force=True)
        self.assertEqual(ft.step, 3)
        self.assertEqual((self.tmp / "ack").read_text(), "12\n", "the plan's generation, once the quorum is its nodes")
        body = json.loads((self.tmp / "progress").read_text())
        self.assertEqual((body["step"], body["world_size"]), (3, 1))
        self.assertEqual(body["generation"], 12, "the plan's it trains on, not DT_GENERATION's 3")
        self.assertEqual(body["in_place"]["nodes"], 1)
        self.assertIsInstance(body["in_place"]["quorum"], int)
        golden = json.loads((GOLDEN / "progress_in_place.json").read_text())
        self.assertEqual(set(body["in_place"]), set(golden["in_place"]))
        self.assertNotIn("run", body, "rank 0 moves between the nodes' own processes")
        self.assertEqual(set(golden["in_place"]["changes"][0]), {
            "quorum", "step", "nodes", "joined", "left", "lost_steps", "paused_s", "at"})
        # dtd moves on (a node came and went): the next commit acknowledges the new plan, and
        # the progress file follows it.
        (self.tmp / "launch_plan").write_text(json.dumps({"generation": 14, "hosts": ["127.0.0.1"]}))
        ft.begin()
        idx = list(ft.shard())
        loss = torch.nn.functional.mse_loss(ft.model(x[idx]), y[idx], reduction="sum") * ft.loss_scale
        loss.backward()
        self.assertTrue(ft.commit())
        session.progress(ft.step, force=True)
        self.assertEqual((self.tmp / "ack").read_text(), "14\n")
        self.assertEqual(json.loads((self.tmp / "progress").read_text())["generation"], 14)
        session.stop_requested = True
        self.assertTrue(session.should_stop())
        self.assertTrue(ft.left)
        self.assertEqual(session.exit_code(), 0)


class ShardTest(unittest.TestCase):
    """Every rank of every node takes its own part of the global batch, and the parts cover it."""

    def test_the_parts_of_a_global_batch_cover_it_once(self):
        dt_torch = load_dt_torch()
        for nodes, local, batch in [(3, 1, 64), (2, 4, 10), (5, 2, 7)]:
            seen = []
            for rank in range(nodes):
                for local_rank in range(local):
                    ft = dt_torch.InPlace.__new__(dt_torch.InPlace)
                    ft.global_batch, ft.local_world, ft.local_rank = batch, local, local_rank
                    ft.manager = mock.Mock(participating_rank=lambda r=rank: r,
                                           num_participants=lambda n=nodes: n)
                    seen += list(ft.shard())
            self.assertEqual(sorted(seen), list(range(batch)), (nodes, local, batch))

    def test_a_node_copying_its_state_takes_no_part(self):
        dt_torch = load_dt_torch()
        ft = dt_torch.InPlace.__new__(dt_torch.InPlace)
        ft.global_batch, ft.local_world, ft.local_rank = 64, 1, 0
        ft.manager = mock.Mock(participating_rank=lambda: None, num_participants=lambda: 2)
        self.assertEqual(list(ft.shard()), [])

    def test_replica_ids_carry_the_node_address(self):
        dt_torch = load_dt_torch()
        rid = dt_torch._replica_id("10.0.1.5")
        self.assertEqual(dt_torch._ip_of(f"{rid}:6f1c"), "10.0.1.5")
        self.assertEqual(rid, "10.0.1.5#261")


if __name__ == "__main__":
    unittest.main()

"""The training_data role: which shards each host receives, the prepare-data command it runs,
and staging through site.yml and train.yml (0 changed the second time).

The playbook tests run the role against a stand-in for ``python -m training prepare-data``
that prints the JSON of design27's contract and writes tiny files, so they take seconds and
test the Ansible side alone: hosts are local folders reached with the local connection.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from tests.conftest import BIN, ROOT

_spec = importlib.util.spec_from_file_location(
    "training_data_filters", ROOT / "roles/training_data/filter_plugins/training_data.py"
)
assert _spec and _spec.loader
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

host_files = filters.training_data_host_files
worker_shards = filters.training_data_worker_shards


def shard_names(count: int) -> list[str]:
    return [f"train-{j:05d}-of-{count:05d}.rec" for j in range(count)]


PREPARED = {"train_shards": shard_names(12), "test_shards": ["test-00000-of-00001.rec"]}


def test_each_worker_reads_the_shards_tensorflow_file_sharding_gives_it() -> None:
    # FILE policy: worker i of N reads shard j when j % N == i.
    assert worker_shards(shard_names(6), 3) == [
        ["train-00000-of-00006.rec", "train-00003-of-00006.rec"],
        ["train-00001-of-00006.rec", "train-00004-of-00006.rec"],
        ["train-00002-of-00006.rec", "train-00005-of-00006.rec"],
    ]


def test_workers_on_several_hosts_get_disjoint_shards_that_cover_the_training_split() -> None:
    workers = ["pi1", "pi2", "pi3", "pi4"]
    staged = {h: host_files(PREPARED, workers, ["pi1"], h) for h in workers}
    train = [f for files in staged.values() for f in files if f.startswith("train-")]
    assert sorted(train) == PREPARED["train_shards"]  # each shard once
    assert staged["pi2"] == [
        "dataset.json",
        "train-00001-of-00012.rec",
        "train-00005-of-00012.rec",
        "train-00009-of-00012.rec",
    ]


def test_a_host_with_two_worker_tasks_gets_the_shards_of_both() -> None:
    # localhost runs worker-0 and worker-1, pi2 worker-2: worker indices 0 and 1 are localhost's.
    workers = ["localhost", "localhost", "pi2"]
    mine = host_files(PREPARED, workers, [], "localhost")
    assert mine == ["dataset.json"] + [t for j, t in enumerate(shard_names(12)) if j % 3 < 2]
    assert host_files(PREPARED, workers, [], "pi2") == ["dataset.json"] + [
        f"train-{j:05d}-of-00012.rec" for j in (2, 5, 8, 11)
    ]


def test_with_more_shards_than_workers_each_worker_reads_several() -> None:
    per_worker = worker_shards(shard_names(12), 5)
    assert [len(files) for files in per_worker] == [3, 3, 2, 2, 2]
    assert worker_shards(shard_names(2), 2) == [[shard_names(2)[0]], [shard_names(2)[1]]]


def test_only_the_hosts_that_evaluate_get_the_test_split() -> None:
    workers = ["pi1", "pi2"]
    assert host_files(PREPARED, workers, ["pi1"], "pi1")[-1] == "test-00000-of-00001.rec"
    assert not [f for f in host_files(PREPARED, workers, ["pi1"], "pi2") if f.startswith("test-")]
    # A parameter_server chief on a host of no worker: the manifest and the test split only.
    assert host_files(PREPARED, workers, ["pi1", "pi5"], "pi5") == [
        "dataset.json",
        "test-00000-of-00001.rec",
    ]


def test_fewer_shards_than_workers_is_refused() -> None:
    # prepare-data raises the shard count to the workers; a mismatch means a stale description.
    with pytest.raises(AnsibleFilterError, match="2 train shards for 3 worker tasks"):
        host_files({"train_shards": shard_names(2)}, ["a", "b", "c"], [], "a")
    with pytest.raises(AnsibleFilterError, match="a run needs 1 or more"):
        worker_shards(shard_names(2), 0)


# A stand-in for `python -m training prepare-data`: the contract's JSON, a line per call in
# <cache>/argv.jsonl, and a file per shard holding its name. The id hashes the settings and
# the source file's bytes, as the real preparer's does.
FAKE_PREPARER = """
import argparse, hashlib, json, sys
from pathlib import Path

parser = argparse.ArgumentParser()
sub = parser.add_subparsers(dest="command")
p = sub.add_parser("prepare-data")
for flag in ("--dataset", "--source", "--image-size", "--color-mode", "--test-fraction",
             "--label-column", "--ignore-columns"):
    p.add_argument(flag)
p.add_argument("--cache-dir", type=Path)
p.add_argument("--skip-bad-images", action="store_true")
p.add_argument("--shards", type=int)
p.add_argument("--workers", type=int, default=1)
p.add_argument("--check", action="store_true")
a = parser.parse_args()
a.cache_dir.mkdir(parents=True, exist_ok=True)
with (a.cache_dir / "argv.jsonl").open("a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if a.color_mode not in ("rgb", "grayscale"):
    sys.exit(f"error: color_mode={a.color_mode} is unknown. Fix: -e color_mode=rgb")
source = Path(a.dataset)
shards = max(a.shards, a.workers)
content = source.read_bytes() if source.is_file() else b""
key = hashlib.sha256(json.dumps(sys.argv[3:6] + [shards]).encode() + content).hexdigest()[:12]
ident = f"{source.stem if '/' in a.dataset else a.dataset}-{key}"
folder = a.cache_dir / ident
train = [f"train-{j:05d}-of-{shards:05d}.rec" for j in range(shards)]
test = ["test-00000-of-00001.rec"]
changed = not (folder / "dataset.json").exists()
if changed and not a.check:
    folder.mkdir()
    for name in [*train, *test, "dataset.json"]:
        (folder / name).write_text(name)
print(json.dumps({"changed": changed, "id": ident, "dir": str(folder), "kind": "csv",
                  "input_shape": [4], "classes": ["a", "b"], "train_examples": 40,
                  "test_examples": 10, "train_shards": train, "test_shards": test,
                  "skipped": [], "ignored_files": 0, "bytes": 100,
                  "ignored_settings": [f"image_size={a.image_size} is ignored"]
                  * (a.image_size != "64")}))
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    """Two hosts reached locally: n1 runs worker-0 and worker-1, n2 worker-2 and is [chief]."""
    fake = tmp_path / "fake" / "training"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_PREPARER)
    python = str(BIN / "python")
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": python,
                "ansible_become": False,
                "training_data_cache_dir": str(tmp_path / "cache"),
                "training_data_code_dir": str(tmp_path / "fake"),
                "training_data_python": python,
                # The hosts' own copy of the training/ package removes their old datasets.
                "training_data_node_python": python,
                "training_data_node_code_dir": str(ROOT),
                "training_run_runs_dir": str(tmp_path / "runs"),
            },
            "children": {
                "cluster": {
                    "children": {
                        "worker": {
                            "hosts": {
                                "n1": {
                                    "tf_cluster_address": "10.0.0.1",
                                    "tf_cluster_ports": {"worker": [2222, 2223]},
                                    "training_data_dir": str(tmp_path / "n1"),
                                },
                                "n2": {
                                    "tf_cluster_address": "10.0.0.2",
                                    "training_data_dir": str(tmp_path / "n2"),
                                },
                            }
                        },
                        "chief": {"hosts": {"n2": None}},
                    }
                }
            },
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return tmp_path


SITE = str(ROOT / "site.yml")


def playbook(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook run from ``cwd`` (where a relative dataset path is taken from)."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(cwd / "hosts.yml"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def staged(root: Path) -> dict[str, list[str]]:
    """Each host's staged files, as <dataset id>/<file>."""
    return {
        host: sorted(
            str(p.relative_to(root / host)) for p in (root / host).rglob("*") if p.is_file()
        )
        for host in ("n1", "n2")
        if (root / host).exists()
    }


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP's counts per host."""
    return {
        m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        for m in re.finditer(r"^(n\d)\s+:\s+(.*)$", stdout, re.M)
    }


def test_site_yml_prepares_once_and_stages_each_host_its_shards(cluster: Path) -> None:
    (cluster / "iris.csv").write_text("a,b,label\n1,2,x\n")
    settings = ["-e", "image_size=48x64", "-e", "color_mode=grayscale", "-e", "test_fraction=0.25"]
    settings += ["-e", "label_column=species", "-e", "skip_bad_images=true"]
    settings += ["-e", '{"ignore_columns": ["row id", "site"]}']  # a list, as in an inventory
    # A relative path is taken from where ansible-playbook runs, not from the project.
    first = playbook(cluster, SITE, "--tags", "data", "-e", "dataset=iris.csv", *settings)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]

    calls = [json.loads(line) for line in (cluster / "cache/argv.jsonl").read_text().splitlines()]
    expected = ["prepare-data", "--dataset", str(cluster / "iris.csv")]
    expected += ["--cache-dir", str(cluster / "cache"), "--image-size", "48x64"]
    expected += ["--color-mode", "grayscale", "--test-fraction", "0.25"]
    expected += ["--label-column", "species", "--ignore-columns", "row id,site"]
    expected += ["--shards", "12", "--workers", "3"]
    expected += ["--skip-bad-images"]
    # site.yml's early check, then the preparation.
    assert calls == [[*expected, "--check"], expected]

    ident = next((cluster / "cache").glob("iris-*")).name
    train = [f"{ident}/train-{j:05d}-of-00012.rec" for j in range(12)]
    test = f"{ident}/test-00000-of-00001.rec"
    assert staged(cluster) == {
        # worker-0 and worker-1: shards j % 3 in (0, 1); worker-0's host evaluates under
        # multi_worker_mirrored.
        "n1": sorted([f"{ident}/dataset.json", test, *train[0::3], *train[1::3]]),
        # worker-2, and the [chief] host that evaluates under parameter_server.
        "n2": sorted([f"{ident}/dataset.json", test, *train[2::3]]),
    }
    assert oct((cluster / "n2" / ident / "dataset.json").stat().st_mode & 0o777) == "0o644"
    # What prepare-data says the dataset ignores is printed once, as a warning.
    assert first.stdout.count("WARNING: image_size=48x64 is ignored") == 1, first.stdout[-3000:]
    # The folder and the files on each host; the preparation counts on one of them.
    assert sum(counts["changed"] for counts in recap(first.stdout).values()) == 5

    second = playbook(cluster, SITE, "--tags", "data", "-e", "dataset=iris.csv", *settings)
    assert second.returncode == 0, second.stdout[-3000:]
    assert {host: c["changed"] for host, c in recap(second.stdout).items()} == {"n1": 0, "n2": 0}


def test_train_yml_stages_the_shards_of_the_run_before_anything_starts(cluster: Path) -> None:
    (cluster / "data.csv").write_text("a,label\n1,x\n")
    result = playbook(cluster, str(ROOT / "train.yml"), "-e", f"dataset={cluster / 'data.csv'}")
    # The fake dataset is no real one: the run stops in training_run's checks, after staging.
    assert "PLAY RECAP" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]
    ident = next((cluster / "cache").glob("data-*")).name
    files = staged(cluster)
    assert f"{ident}/test-00000-of-00001.rec" in files["n1"]  # worker-0: the chief of this run
    assert not [f for f in files["n2"] if "test-" in f]  # [chief] plays no part in this run
    assert len([f for f in files["n2"] if "train-" in f]) == 4


def test_a_node_keeps_its_latest_datasets_and_only_the_shards_it_reads(cluster: Path) -> None:
    data = cluster / "data.csv"
    data.write_text("a,label\n1,x\n")
    first = playbook(cluster, SITE, "--tags", "data", "-e", "dataset=data.csv")
    assert first.returncode == 0, first.stdout[-3000:]
    old = next((cluster / "cache").glob("data-*")).name

    # One worker task on each host now: n1 reads shards 0, 2, 4 ... where it read 0, 1, 3, 4 ...
    one_port = ["-e", '{"tf_cluster_ports": {"worker": [2222]}}']
    second = playbook(cluster, SITE, "--tags", "data", "-e", "dataset=data.csv", *one_port)
    assert second.returncode == 0, second.stdout[-3000:]
    train = [f"{old}/train-{j:05d}-of-00012.rec" for j in range(12)]
    assert [f for f in staged(cluster)["n1"] if "train-" in f] == train[0::2]
    assert [f for f in staged(cluster)["n2"] if "train-" in f] == train[1::2]

    data.write_text("a,label\n2,y\n")  # a new id
    third = playbook(
        cluster,
        SITE,
        "--tags",
        "data",
        "-e",
        "dataset=data.csv",
        *one_port,
        "-e",
        "training_data_keep=1",
    )
    assert third.returncode == 0, third.stdout[-3000:]
    new = {f.split("/")[0] for files in staged(cluster).values() for f in files}
    assert old not in new and len(new) == 1
    # The control node keeps every prepared dataset: export reads them again.
    assert (cluster / "cache" / old / "dataset.json").exists()


def test_a_setting_prepare_data_refuses_stops_site_yml_early(cluster: Path) -> None:
    (cluster / "data.csv").write_text("a,label\n1,x\n")
    result = playbook(cluster, SITE, "-e", "dataset=data.csv", "-e", "color_mode=rbg")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "color_mode=rbg is unknown. Fix: -e color_mode=rgb" in text, text[-2000:]
    assert "PLAY [Check every node before changing anything]" not in text
    assert staged(cluster) == {}


def test_mnist_is_prepared_from_its_download(cluster: Path) -> None:
    # The download is there with the checksum given: get_url keeps it, nothing is fetched.
    download = cluster / "cache" / "download-mnist.npz"
    download.parent.mkdir()
    download.write_bytes(b"not really mnist")
    checksum = "sha256:" + hashlib.sha256(download.read_bytes()).hexdigest()
    result = playbook(
        cluster,
        SITE,
        *("--tags", "data", "-e", "dataset=mnist"),
        *("-e", f"training_data_mnist_checksum={checksum}"),
    )
    assert result.returncode == 0, result.stdout[-3000:]
    prepare = json.loads((cluster / "cache/argv.jsonl").read_text().splitlines()[-1])
    assert prepare[:3] == ["prepare-data", "--dataset", "mnist"]
    assert prepare[-2:] == ["--source", str(download)]
    assert "--skip-bad-images" not in prepare

"""PyTorch checkpoints read without PyTorch (anygpu.io.pth): fixtures are written by real
torch in each test; hostile files must fail with a clear error and run nothing."""

from __future__ import annotations

import collections
import io
import os
import pickle
import stat
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu.io import pth


def _save(obj, path, zip_format=True):
    torch.save(obj, path, _use_new_zipfile_serialization=zip_format)
    return path


def _host(value):
    return value.detach().float().numpy() if value.dtype == torch.bfloat16 else value.detach().numpy()


# --------------------------------------------------------------------------- models


def _compare_model(tmp_path, torch_model, ag_model, x, atol=1e-5):
    torch_model.eval()
    ag_model.eval()
    path = _save(torch_model.state_dict(), tmp_path / "model.pth")
    state = ag.load(path)
    assert isinstance(state, collections.OrderedDict) and list(state) == list(torch_model.state_dict())
    ag_model.load_state_dict(state)
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(x))
    got = ag_model(ag.tensor(x))
    if isinstance(expected, tuple):  # LSTM: (output, (h, c))
        expected, got = expected[0], got[0]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=atol, rtol=1e-4)


def test_linear_mlp_state_dict_gives_torchs_outputs(tmp_path, rng):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.ReLU(), torch.nn.Linear(13, 3))
    mine = ag.nn.Sequential(ag.nn.Linear(7, 13), ag.nn.ReLU(), ag.nn.Linear(13, 3))
    _compare_model(tmp_path, model, mine, rng.standard_normal((5, 7)).astype(np.float32))


def test_conv_batchnorm_state_dict_gives_torchs_outputs(tmp_path, rng):
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.BatchNorm2d(5), torch.nn.ReLU(),
                                torch.nn.Conv2d(5, 2, 3, stride=2))
    with torch.no_grad():  # running statistics that are not the defaults
        model(torch.randn(8, 3, 9, 9) * 3 + 1)
    model[1].train()
    model(torch.randn(8, 3, 9, 9))
    mine = ag.nn.Sequential(ag.nn.Conv2d(3, 5, 3, padding=1), ag.nn.BatchNorm2d(5), ag.nn.ReLU(),
                            ag.nn.Conv2d(5, 2, 3, stride=2))
    state = torch.load(_save(model.state_dict(), tmp_path / "cnn.pth"), weights_only=True)
    assert state["1.num_batches_tracked"].item() == 2
    loaded = ag.load(tmp_path / "cnn.pth")
    assert loaded["1.num_batches_tracked"].dtype == ag.int64 and loaded["1.num_batches_tracked"].item() == 2
    _compare_model(tmp_path, model, mine, rng.standard_normal((2, 3, 9, 9)).astype(np.float32))


def test_lstm_state_dict_gives_torchs_outputs(tmp_path, rng):
    torch.manual_seed(3)
    model = torch.nn.LSTM(6, 11, num_layers=2, batch_first=True)
    mine = ag.nn.LSTM(6, 11, num_layers=2, batch_first=True)
    _compare_model(tmp_path, model, mine, rng.standard_normal((3, 4, 6)).astype(np.float32))


# --------------------------------------------------------------------------- layouts and values


def test_views_strides_offsets_and_shared_storage(tmp_path):
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    obj = {
        "base": base,
        "transposed": base.transpose(0, 2),
        "sliced": base[1:, ::2, 3:],
        "row": base[2, 1],
        "expanded": torch.arange(4.0).reshape(4, 1).expand(4, 6),
        "narrow": base.reshape(-1)[7:19],
        "empty": base[:, :0],
        "scalar": base[1, 2, 3],
    }
    obj["again"] = obj["sliced"]  # the same tensor object twice
    for zip_format in (True, False):
        path = _save(obj, tmp_path / f"views{zip_format}.pth", zip_format)
        loaded = ag.load(path)
        for key, value in obj.items():
            assert loaded[key].shape == tuple(value.shape), key
            np.testing.assert_array_equal(loaded[key].numpy(), value.numpy(), err_msg=key)
        assert loaded["again"] is loaded["sliced"]
        assert loaded["scalar"].ndim == 0 and loaded["scalar"].item() == 33.0
        for key in ("transposed", "sliced", "row", "expanded", "narrow", "scalar"):  # torch's geometry
            assert loaded[key].stride() == obj[key].stride(), key
            assert loaded[key].storage_offset() == obj[key].storage_offset(), key
            assert loaded[key].is_contiguous() == obj[key].is_contiguous(), key
        # one storage, as in torch: a write through one tensor is seen by those sharing it
        with ag.no_grad():
            loaded["sliced"].add_(1000)
        expected = base.clone()
        expected[1:, ::2, 3:] += 1000
        np.testing.assert_array_equal(loaded["base"].numpy(), expected.numpy())
        np.testing.assert_array_equal(loaded["transposed"].numpy(), expected.transpose(0, 2).numpy())
        np.testing.assert_array_equal(loaded["narrow"].numpy(), expected.reshape(-1)[7:19].numpy())


ALL_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
              torch.int8, torch.uint8, torch.bool, torch.uint16, torch.uint32]


@pytest.mark.parametrize("zip_format", [True, False])
def test_every_dtype(tmp_path, zip_format):
    gen = torch.Generator().manual_seed(4)
    values = {}
    for dtype in ALL_DTYPES:
        if dtype.is_floating_point:
            t = (torch.randn(3, 5, generator=gen, dtype=torch.float64) * 100).to(dtype)
        elif dtype == torch.bool:
            t = torch.randn(3, 5, generator=gen) > 0
        else:
            t = torch.randint(0, 100, (3, 5), generator=gen, dtype=torch.int64).to(dtype)
        values[str(dtype)] = t.t()  # non-contiguous too
    if not zip_format:  # torch's legacy writer has no storage type for uint16/uint32
        values = {key: value for key, value in values.items() if key not in ("torch.uint16", "torch.uint32")}
    path = _save(values, tmp_path / "dtypes.pth", zip_format)
    loaded = ag.load(path)
    expected_dtype = {"torch.float32": ag.float32, "torch.float16": ag.float16, "torch.bfloat16": ag.float32,
                      "torch.int64": ag.int64, "torch.bool": ag.bool, "torch.float64": (
                          ag.float64 if ag.float64.storage is not None else ag.float32)}
    for key, value in values.items():
        got = loaded[key]
        assert got.dtype is expected_dtype.get(key, ag.int32), key
        np.testing.assert_array_equal(got.numpy(), _host(value).astype(got.numpy().dtype), err_msg=key)
    host = pth.read(path)  # host reading keeps every dtype NumPy has
    for key, value in values.items():
        assert host[key].numpy().dtype == (np.float32 if key == "torch.bfloat16" else _host(value).dtype), key
        np.testing.assert_array_equal(host[key].numpy(), _host(value), err_msg=key)


def test_nested_containers_scalars_and_torch_objects(tmp_path):
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    obj = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 7, "loss": 0.25,
        "name": "run", "none": None, "flag": True, "list": [torch.ones(2), (3, "x", [4.5])],
        "size": torch.Size([2, 3]), "device": torch.device("cuda", 1), "dtype": torch.float16,
        "other_dtype": torch.uint8, "set": {1, 2}, "bytes": b"\x00\xff", "complex": 1 + 2j,
        "param": torch.nn.Parameter(torch.full((2,), 3.0)), "frozen": torch.nn.Parameter(torch.ones(1), False),
        "zero_d": torch.tensor(9), "grad": torch.ones(2, requires_grad=True),
    }
    loaded = ag.load(_save(obj, tmp_path / "nested.pth"))
    assert (loaded["epoch"], loaded["loss"], loaded["name"], loaded["none"], loaded["flag"]) == (7, 0.25, "run", None,
                                                                                               True)
    assert loaded["list"][1] == (3, "x", [4.5]) and loaded["list"][0].tolist() == [1.0, 1.0]
    assert loaded["size"] == (2, 3) and repr(loaded["size"]) == "torch.Size([2, 3])"
    assert loaded["device"] == ag.device("cuda", 1) and loaded["dtype"] is ag.float16
    assert repr(loaded["other_dtype"]) == "torch.uint8"
    assert (loaded["set"], loaded["bytes"], loaded["complex"]) == ({1, 2}, b"\x00\xff", 1 + 2j)
    assert isinstance(loaded["param"], ag.nn.Parameter) and loaded["param"].requires_grad
    assert isinstance(loaded["frozen"], ag.nn.Parameter) and not loaded["frozen"].requires_grad
    assert loaded["grad"].requires_grad and not isinstance(loaded["grad"], ag.nn.Parameter)
    assert loaded["zero_d"].shape == () and loaded["zero_d"].item() == 9
    assert loaded["model"]._metadata == model.state_dict()._metadata
    state = loaded["optimizer"]["state"][0]
    np.testing.assert_array_equal(state["exp_avg"].numpy(), optimizer.state_dict()["state"][0]["exp_avg"].numpy())
    assert loaded["optimizer"]["param_groups"][0]["lr"] == 0.01
    mine = ag.nn.Linear(4, 2)
    mine.load_state_dict(loaded["model"])
    np.testing.assert_array_equal(mine.weight.numpy(), model.weight.detach().numpy())


def test_torch_load_under_the_compat_import_and_file_objects(tmp_path):
    import anygpu as torch_compat
    weight = torch.randn(3, 2)
    path = _save({"w": weight}, tmp_path / "w.pt")
    for loaded in (torch_compat.load(path, map_location="cpu", weights_only=True),
                   torch_compat.load(str(path), map_location=torch_compat.device("cpu"), weights_only=False),
                   torch_compat.load(io.BytesIO(path.read_bytes()))):
        np.testing.assert_array_equal(loaded["w"].numpy(), weight.numpy())


def test_loads_in_a_process_where_torch_cannot_be_imported(tmp_path):
    torch.manual_seed(6)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    path = _save(model.state_dict(), tmp_path / "model.pth")
    x = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5)
    with torch.no_grad():
        np.save(tmp_path / "expected.npy", model(torch.from_numpy(x)).numpy())
    np.save(tmp_path / "x.npy", x)
    script = f"""
import sys
sys.modules["torch"] = None  # `import torch` raises ImportError from here on
import numpy as np
import anygpu as ag
try:
    import torch
    raise SystemExit("torch was importable")
except ImportError:
    pass
model = ag.nn.Sequential(ag.nn.Linear(5, 4), ag.nn.Tanh(), ag.nn.Linear(4, 2))
model.load_state_dict(ag.load({str(path)!r}))
got = model(ag.tensor(np.load({str(tmp_path / "x.npy")!r}))).numpy()
np.testing.assert_allclose(got, np.load({str(tmp_path / "expected.npy")!r}), atol=1e-5)
assert not any(name == "torch" or name.startswith("torch.") for name, module in sys.modules.items()
               if module is not None)
print("loaded without torch")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded without torch" in done.stdout


def test_convert_command_writes_a_signed_safetensors_file(tmp_path):
    from anygpu import cli
    torch.manual_seed(7)
    model = torch.nn.Linear(3, 4)
    source = _save({"model": model.state_dict(), "epoch": 2, "half": torch.ones(2, dtype=torch.bfloat16)},
                   tmp_path / "in.pth")
    target = tmp_path / "out.safetensors"
    assert cli.main(["convert", str(source), str(target)]) == 0
    assert ag.nanosign.verify(target).status == "verified"
    converted = ag.load(target)
    assert converted["epoch"] == 2 and converted["half"].dtype == ag.float32
    np.testing.assert_array_equal(converted["model"]["weight"].numpy(), model.weight.detach().numpy())
    wide = _save({"big": torch.tensor([2**40, -3]), "bytes": torch.arange(5, dtype=torch.uint8)}, tmp_path / "w.pth")
    assert cli.main(["convert", str(wide), str(tmp_path / "w.safetensors")]) == 0
    arrays = ag.io.checkpoint.load(tmp_path / "w.safetensors")  # every dtype kept exactly in the file
    assert arrays["big"].dtype == np.int64 and arrays["big"].tolist() == [2**40, -3]
    assert arrays["bytes"].dtype == np.uint8 and arrays["bytes"].tolist() == [0, 1, 2, 3, 4]
    flat = _save(model.state_dict(), tmp_path / "flat.pth")
    assert cli.main(["convert", str(flat), str(tmp_path / "flat.safetensors")]) == 0
    assert sorted(ag.load(tmp_path / "flat.safetensors")) == ["bias", "weight"]


def test_convert_command_reports_bad_input_in_one_line(tmp_path, capsys):
    from anygpu import cli
    (tmp_path / "bad.pth").write_bytes(b"PK\x03\x04 not really a zip")
    assert cli.main(["convert", str(tmp_path / "bad.pth"), str(tmp_path / "out.safetensors")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("anygpu: error: load:") and error.count("\n") == 1
    assert not (tmp_path / "out.safetensors").exists()


# --------------------------------------------------------------------------- hostile files


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _zip_with(source, replace: dict[str, bytes] | None = None, add: list | None = None, drop=()) -> bytes:
    """The zip archive at `source` with members replaced, added (ZipInfo, bytes) or dropped."""
    out = io.BytesIO()
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(out, "w") as new:
        for info in old.infolist():
            if info.filename in drop:
                continue
            name = info.filename.split("/", 1)[1]
            new.writestr(info, (replace or {}).get(name, old.read(info)))
        for info, data in add or []:
            new.writestr(info, data)
    return out.getvalue()


def test_a_pickle_that_calls_os_system_runs_nothing(tmp_path):
    marker = tmp_path / "marker"
    evil = {"weight": torch.ones(2), "payload": _Evil(marker)}
    program = pickle.dumps({"n": 1, "payload": _Evil(marker)}, protocol=2)
    pickle.loads(program)  # the plain unpickler runs it: the test below could fail
    assert marker.exists()
    marker.unlink()
    zipped = _save(evil, tmp_path / "evil.pth")  # torch.save writes whatever it is given
    legacy = _save(evil, tmp_path / "evil_legacy.pt", zip_format=False)
    raw = tmp_path / "evil.pkl"
    raw.write_bytes(program)
    for path in (zipped, legacy, raw):
        for reader in (ag.load, pth.read, lambda p: ag.load(io.BytesIO(p.read_bytes()))):
            with pytest.raises(ValueError, match=rf"GLOBAL {os.system.__module__}\.system is not an allowed global"):
                reader(path)
            with pytest.raises(pickle.UnpicklingError):
                reader(path)
    assert not marker.exists()


@pytest.mark.parametrize("name", ["builtins.eval", "builtins.getattr", "collections.defaultdict",
                                  "torch.storage._load_from_bytes", "numpy.core.multiarray._reconstruct",
                                  "subprocess.Popen", "torch.nn.modules.linear.Linear", "test_pth._Evil"])
def test_globals_outside_the_allow_list_are_refused_by_name(tmp_path, name):
    module, attribute = name.rsplit(".", 1)
    program = (b"\x80\x02c" + module.encode() + b"\n" + attribute.encode() + b"\n)R.")
    path = tmp_path / "x.pth"
    path.write_bytes(_zip_with(_save({}, tmp_path / "empty.pth"), {"data.pkl": program}))
    with pytest.raises(pth.PthError, match=rf"GLOBAL {name} is not an allowed global"):
        ag.load(path)


def test_a_whole_module_saved_by_torch_is_refused(tmp_path):
    path = _save(torch.nn.Linear(2, 2), tmp_path / "module.pth")
    with pytest.raises(ValueError, match="GLOBAL torch.nn.modules.linear.Linear"):
        ag.load(path)
    with pytest.raises(ValueError, match=r"whole module \(Linear\).*state_dict\(\)"):
        ag.save(ag.nn.Linear(2, 2), tmp_path / "mine.ckpt")
    assert not (tmp_path / "mine.ckpt").exists()


def test_build_cannot_change_anygpus_dtypes(tmp_path):
    # GLOBAL torch.float32, then BUILD with slot state {'name': 'evil'}
    program = b"\x80\x02ctorch\nfloat32\nN}X\x04\x00\x00\x00nameX\x04\x00\x00\x00evils\x86b."
    path = tmp_path / "x.pth"
    path.write_bytes(_zip_with(_save({}, tmp_path / "empty.pth"), {"data.pkl": program}))
    with pytest.raises(pth.PthError, match="may not set the state"):
        ag.load(path)
    assert ag.float32.name == "float32"


def _storage_program(numel: int, size=(2, 3), stride=(3, 1), offset=0, key="0") -> bytes:
    """data.pkl of one float tensor: _rebuild_tensor_v2(storage(key, numel), offset, size, stride, False, {})."""
    def integer(value):
        return b"\x8a" + bytes([len(value.to_bytes(9, "little", signed=True))]) + value.to_bytes(
            9, "little", signed=True)

    def tup(values):
        return b"(" + b"".join(integer(v) for v in values) + b"t"

    pid = (b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\n" + b"X" + struct.pack("<I", len(key)) + key.encode()
           + b"X\x03\x00\x00\x00cpu" + integer(numel) + b"tQ")
    return (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" + pid + integer(offset) + tup(size) + tup(stride)
            + b"\x89ccollections\nOrderedDict\n)RtR.")


def test_declared_sizes_are_checked_before_memory_is_taken(tmp_path):
    source = _save({"x": torch.arange(6.0)}, tmp_path / "six.pth")
    cases = {
        "huge storage": (_storage_program(10**15), "declares 4000000000000000"),
        "wrong storage size": (_storage_program(7), "declares 28"),
        "beyond the storage": (_storage_program(6, size=(2, 3), stride=(4, 1)), "reaches element 6"),
        "offset beyond": (_storage_program(6, size=(1,), stride=(1,), offset=6), "reaches element 6"),
        "missing storage": (_storage_program(6, key="9"), "does not hold"),
        "too many dims": (_storage_program(6, size=(1,) * 65, stride=(0,) * 65), "at most 64"),
    }
    for label, (program, message) in cases.items():
        path = tmp_path / "x.pth"
        path.write_bytes(_zip_with(source, {"data.pkl": program}))
        with pytest.raises(pth.PthError, match=message):
            ag.load(path)
    path.write_bytes(_zip_with(source, {"data.pkl": _storage_program(6)}))  # the program itself is sound
    assert ag.load(path).tolist() == [[0, 1, 2], [3, 4, 5]]
    # 10**12 elements from a 6-element storage (stride 0)
    path.write_bytes(_zip_with(source, {"data.pkl": _storage_program(6, size=(10**6, 10**6), stride=(0, 0))}))
    for reader in (ag.load, pth.read):
        with pytest.raises(pth.PthError, match="would need over 1073741824 bytes"):
            reader(path)


def test_legacy_format_declaring_more_than_the_file_holds(tmp_path):
    path = _save({"x": torch.arange(6.0)}, tmp_path / "legacy.pt", zip_format=False)
    data = path.read_bytes()
    head = pickle.dumps(0x1950A86A20F9469CFC6C, 2) + pickle.dumps(1001, 2) + pickle.dumps({"little_endian": True}, 2)
    assert data.startswith(head[:20])  # torch's magic number and protocol version
    hostile = head + _storage_program(10**12)[:-1] + b"." + pickle.dumps(["0"], 2) + struct.pack("<q", 10**12)
    (tmp_path / "hostile.pt").write_bytes(hostile)
    with pytest.raises(pth.PthError, match="declares storages of"):
        ag.load(tmp_path / "hostile.pt")
    for cut in (len(data) - 1, len(data) - 30, len(head) + 5, 3):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        with pytest.raises(pth.PthError):
            pth.load(tmp_path / "cut.pt")


def test_truncated_and_damaged_zips(tmp_path):
    data = _save({"w": torch.randn(50, 50), "b": torch.randn(50)}, tmp_path / "ok.pth").read_bytes()
    for cut in sorted({1, 4, 10, 100, len(data) // 2, len(data) - 200, len(data) - 22, len(data) - 1}):
        (tmp_path / "cut.pth").write_bytes(data[:cut])
        with pytest.raises(pth.PthError, match="load: "):
            (ag.load if cut >= 9 else pth.load)(tmp_path / "cut.pth")  # shorter: not recognisably torch's
    with zipfile.ZipFile(tmp_path / "ok.pth") as archive:  # a changed byte inside a tensor's storage
        info = archive.getinfo("ok/data/0")
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + 100
    damaged = bytearray(data)
    damaged[at] ^= 0x01
    (tmp_path / "flip.pth").write_bytes(bytes(damaged))
    with pytest.raises(pth.PthError, match="'ok/data/0' fails its CRC-32 check"):
        ag.load(tmp_path / "flip.pth")
    rng = np.random.default_rng(8)
    for _ in range(60):  # flipped bytes anywhere: a clear error or the right shapes, never a crash
        damaged = bytearray(data)
        for at in rng.integers(0, len(damaged), 3):
            damaged[at] ^= 0xFF
        (tmp_path / "flip.pth").write_bytes(bytes(damaged))
        try:
            loaded = ag.load(tmp_path / "flip.pth")
        except ValueError:
            continue
        assert isinstance(loaded, dict)


def test_zip_bombs_and_symlinks_are_refused(tmp_path):
    source = _save({"x": torch.zeros(4)}, tmp_path / "x.pth")
    deflated = tmp_path / "deflated.pth"
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            if info.filename.endswith("data/0"):
                continue
            new.writestr(info.filename, old.read(info))
        with new.open("x/data/0", "w", force_zip64=True) as member:
            chunk = bytes(1 << 20)
            for _ in range(64):
                member.write(chunk)
    info = zipfile.ZipFile(deflated).getinfo("x/data/0")
    assert info.file_size == 64 << 20 and info.compress_size < info.file_size // 500
    with pytest.raises(pth.PthError, match="zip bomb"):
        ag.load(deflated)
    link = zipfile.ZipInfo("x/data/1")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    linked = tmp_path / "link.pth"
    linked.write_bytes(_zip_with(source, add=[(link, b"/etc/passwd")]))
    with pytest.raises(pth.PthError, match="symbolic link"):
        ag.load(linked)
    encrypted = bytearray(_zip_with(source))
    central = encrypted.rfind(b"PK\x01\x02")
    encrypted[central + 8] |= 1  # the central directory's flag bits: encrypted
    (tmp_path / "enc.pth").write_bytes(bytes(encrypted))
    with pytest.raises(pth.PthError, match="encrypted"):
        ag.load(tmp_path / "enc.pth")


def test_deeply_nested_and_recursive_pickles(tmp_path):
    source = _save({}, tmp_path / "empty.pth")
    deep = b"\x80\x02" + b"]" * 100_000 + b"a" * 99_999 + b"."  # 100000 nested lists
    path = tmp_path / "deep.pth"
    path.write_bytes(_zip_with(source, {"data.pkl": deep}))
    with pytest.raises(pth.PthError, match="nested"):
        ag.load(path)
    recursive = [1]
    recursive.append(recursive)
    path.write_bytes(_zip_with(source, {"data.pkl": pickle.dumps(recursive, 2)}))
    loaded = ag.load(path)
    assert loaded[0] == 1 and loaded[1] is loaded


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "x.pth").write_bytes(b"\x80\x02K\x01.")  # a pickle of 1, without the legacy header
    with pytest.raises(pth.PthError, match="magic number 1"):
        pth.read(tmp_path / "x.pth")
    with pytest.raises(pth.PthError, match="neither a zip archive nor a pickle"):
        pth.read(io.BytesIO(b"hello world"))


def test_float16_without_shader_f16_loads_as_float32_with_a_warning(tmp_path, monkeypatch):
    values = torch.tensor([1.5, -2.25, 65504.0], dtype=torch.float16)
    path = _save({"h": values}, tmp_path / "half.pth")
    assert ag.load(path)["h"].dtype is ag.float16  # this adapter has the feature
    monkeypatch.setattr(type(ag.gpu()), "supports", lambda self, dtype: dtype != "f16")
    monkeypatch.setattr(pth, "_WARNED", set())
    with pytest.warns(UserWarning, match="float16 tensors become float32"):
        loaded = ag.load(path)["h"]
    assert loaded.dtype is ag.float32 and loaded.tolist() == [1.5, -2.25, 65504.0]


def test_big_endian_archives(tmp_path):
    values = {"f": torch.randn(3, 4), "i": torch.arange(-3, 3, dtype=torch.int64), "h": torch.randn(5).half()}
    source = _save(values, tmp_path / "little.pth")
    with zipfile.ZipFile(source) as archive:
        program = archive.read("little/data.pkl")
    keys = {name: key for key, name in enumerate(values)}  # torch numbers storages in pickling order
    swapped = {f"data/{keys[name]}": tensor.numpy().byteswap().tobytes() for name, tensor in values.items()}
    path = tmp_path / "big.pth"
    path.write_bytes(_zip_with(source, {"byteorder": b"big", "data.pkl": program, **swapped}))
    loaded = ag.load(path)
    for name, tensor in values.items():
        np.testing.assert_array_equal(loaded[name].numpy(), tensor.numpy(), err_msg=name)
    path.write_bytes(_zip_with(source, {"byteorder": b"middle"}))
    with pytest.raises(pth.PthError, match="byteorder record"):
        ag.load(path)


def test_torchs_neg_bit_and_unknown_tensor_metadata(tmp_path):
    base = torch.arange(1.0, 7.0).reshape(2, 3)
    negated = torch._neg_view(base.t())
    assert negated.is_neg()
    path = _save({"base": base, "negated": negated}, tmp_path / "neg.pth")
    for reader in (ag.load, pth.read):
        loaded = reader(path)
        np.testing.assert_array_equal(loaded["negated"].numpy(), negated.resolve_neg().numpy())
        np.testing.assert_array_equal(loaded["base"].numpy(), base.numpy())
    with zipfile.ZipFile(path) as archive:
        program = archive.read("neg/data.pkl")
    assert program.count(b"X\x03\x00\x00\x00neg") == 1
    path.write_bytes(_zip_with(path, {"data.pkl": program.replace(b"X\x03\x00\x00\x00neg", b"X\x03\x00\x00\x00odd")}))
    with pytest.raises(pth.PthError, match="metadata {'odd': True}"):
        ag.load(path)


def test_opcodes_outside_torchs_set_are_refused_before_anything_runs(tmp_path):
    source = _save({}, tmp_path / "empty.pth")
    path = tmp_path / "x.pth"
    cases = {
        "BYTEARRAY8": pickle.dumps(bytearray(b"abc"), protocol=5),
        "READONLY_BUFFER": b"\x80\x05C\x03abc\x98.",
        "INST": b"(ios\nsystem\nS'true'\n.",  # protocol 0's INST: os.system('true')
        "INT": pickle.dumps(1, protocol=0),
    }
    for name, program in cases.items():
        path.write_bytes(_zip_with(source, {"data.pkl": program}))
        with pytest.raises(pth.PthError, match=f"opcode {name} "):
            ag.load(path)


def test_mutated_pickles_give_only_clear_errors(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    source = _save({"m": model.state_dict(), "x": torch.arange(10.0)[2:8:2], "l": [1, "a", (2.5, None)], "s": {1}},
                   tmp_path / "f.pth")
    legacy = _save({"m": model.state_dict()}, tmp_path / "g.pt", zip_format=False).read_bytes()
    with zipfile.ZipFile(source) as archive:
        program = archive.read("f/data.pkl")
    rng = np.random.default_rng(9)

    def mutate(data: bytes) -> bytes:
        changed = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(changed)))
            kind = int(rng.integers(0, 3))
            if kind == 0:
                changed[at] = int(rng.integers(0, 256))
            elif kind == 1:
                del changed[at:at + int(rng.integers(1, 8))]
            else:
                changed[at:at] = rng.integers(0, 256, int(rng.integers(1, 4))).astype(np.uint8).tobytes()
        return bytes(changed)

    outcomes = {"loaded": 0, "refused": 0}
    for attempt in range(300):
        data = _zip_with(source, {"data.pkl": mutate(program)}) if attempt % 2 else mutate(legacy)
        try:
            pth.load(io.BytesIO(data))
            outcomes["loaded"] += 1
        except pth.PthError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 200, outcomes

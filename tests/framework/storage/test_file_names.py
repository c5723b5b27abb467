"""A user's folder is a name, never a pattern: found files, and no pattern built from a path in
the source."""

import ast
import pathlib

import pytest

from framework.storage import file_names

ROOT = pathlib.Path(__file__).resolve().parents[3]
PACKAGES = ("framework", "experiments", "agents")
GLOB_CALLS = {"glob.glob", "glob.iglob", "gfile.glob", "tf.io.gfile.glob"}


def test_matching_reads_the_folder_as_a_name_and_the_pattern_as_one(tmp_path):
    folder = tmp_path / "lr[0.01]*?"
    folder.mkdir()
    for name in ("ckpt-1.index", "ckpt-12.complete", ".tmp.ckpt-2.index", "events.out.tfevents.1"):
        (folder / name).write_bytes(b"")
    assert file_names.matching(folder, "ckpt-*") == [
        str(folder / "ckpt-1.index"),
        str(folder / "ckpt-12.complete"),
    ]
    assert file_names.matching(folder, "ckpt-?.*") == [str(folder / "ckpt-1.index")]
    assert file_names.matching(folder, ".tmp.*") == [str(folder / ".tmp.ckpt-2.index")]
    assert file_names.matching(folder, "*tfevents*") == [str(folder / "events.out.tfevents.1")]
    assert file_names.matching(tmp_path / "lr[0.01]", "*") == []  # not a folder of its own


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _unescaped_parts(pattern: ast.AST, names_only: bool) -> list[str]:
    """The parts of a glob pattern that come from a variable and are not `glob.escape`d: a path
    read as a pattern. A bare variable is the pattern itself where `root_dir` holds the folder
    (`names_only`), else a path built elsewhere."""
    if isinstance(pattern, ast.Constant):
        return []
    if isinstance(pattern, ast.Call) and _dotted(pattern.func) == "glob.escape":
        return []
    if isinstance(pattern, ast.Call) and _dotted(pattern.func) == "os.path.join":
        return [part for arg in pattern.args for part in _unescaped_parts(arg, False)]
    if isinstance(pattern, ast.BinOp) and isinstance(pattern.op, ast.Add):
        return _unescaped_parts(pattern.left, False) + _unescaped_parts(pattern.right, False)
    if isinstance(pattern, ast.JoinedStr):
        values = [v.value for v in pattern.values if isinstance(v, ast.FormattedValue)]
        return [part for value in values for part in _unescaped_parts(value, False)]
    if isinstance(pattern, ast.Name) and names_only:
        return []
    return [ast.unparse(pattern)]


def _glob_calls(source: str) -> list[tuple[str, bool]]:
    """(`line: call`, whether its pattern holds an unescaped path) for each glob call."""
    tree = ast.parse(source)
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "glob"
        for alias in node.names
        if alias.name in ("glob", "iglob")
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = _dotted(node.func)
        if name not in GLOB_CALLS and name not in imported:
            continue
        names_only = any(keyword.arg == "root_dir" for keyword in node.keywords)
        unescaped = bool(_unescaped_parts(node.args[0], names_only))
        found.append((f"{node.lineno}: {ast.unparse(node)}", unescaped))
    return found


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ('glob.glob(os.path.join(folder, "ckpt-*"))', True),
        ('glob.glob(prefix + ".*")', True),
        ('glob.iglob(f"{folder}/*.pb")', True),
        ("glob.glob(pattern)", True),  # built elsewhere from a path
        ('from glob import glob\nglob(os.path.join(folder, "*"))', True),
        ('tf.io.gfile.glob(os.path.join(folder, "*"))', True),
        ('glob.glob(os.path.join(glob.escape(folder), "ckpt-*"))', False),
        ('glob.glob(glob.escape(prefix) + ".*")', False),
        ('glob.glob(f"{glob.escape(folder)}/*.pb")', False),
        ("glob.glob(pattern, root_dir=folder)", False),  # the folder is never a pattern
        ('glob.glob("/proc/[0-9]*/stat")', False),
    ],
)
def test_the_check_tells_a_path_read_as_a_pattern(source, flagged):
    ((_, unescaped),) = _glob_calls(source)
    assert unescaped == flagged


def test_no_glob_pattern_is_built_from_a_path():
    """Escape the folder part (`glob.escape`) or match names (`file_names.matching`)."""
    calls = {
        f"{path.relative_to(ROOT)}:{call}": unescaped
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for call, unescaped in _glob_calls(path.read_text())
    }
    assert any(name.startswith("framework/storage/file_names.py") for name in calls), calls
    assert not [call for call, unescaped in calls.items() if unescaped]


@pytest.mark.parametrize("folder", ["lr[0.01]/export", "export[1]"])
def test_a_savedmodel_in_a_folder_named_like_a_pattern_loads_through_the_readable_path(
    tmp_path, folder
):
    import tensorflow as tf

    module = tf.Module()
    module.scale = tf.Variable(3.0)
    module.call = tf.function(
        lambda x: x * module.scale, input_signature=[tf.TensorSpec([], tf.float32)]
    )
    directory = tmp_path / folder
    tf.saved_model.save(module, str(directory))
    with pytest.raises(FileNotFoundError):  # TensorFlow's loader reads the path as a pattern
        tf.saved_model.load(str(directory))
    with file_names.tensorflow_readable_folder(str(directory)) as readable:
        assert float(tf.saved_model.load(readable).call(2.0)) == 6.0
    assert not pathlib.Path(readable).exists()  # the link is gone after the block

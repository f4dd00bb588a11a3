"""Settings come from the project that holds the problem file, and bad settings are one line naming file and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_kernelopt.config import config_for_problem, load_config
from pytest_kernelopt.errors import UsageError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """proj/pyproject.toml with settings, a problem two folders below it, and a nested pyproject without settings."""
    proj = tmp_path / "proj"
    write(proj / "pyproject.toml", """\
        [project]
        name = "proj"

        [tool.kernelopt]
        problems = ["models/**/*.py"]
        kernels_dir = "store/kernels"
        device = "cpu"
        """)
    write(proj / "models" / "pyproject.toml", '[project]\nname = "models"\n')  # a sub-package, no settings
    write(proj / "models" / "deep" / "x.py", "")
    return proj


def test_settings_come_from_the_problems_project_not_the_cwd(project: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere / "pyproject.toml", '[tool.kernelopt]\nkernels_dir = "wrong"\ndevice = "cuda"\n')
    monkeypatch.chdir(elsewhere)
    config = config_for_problem(project / "models" / "deep" / "x.py")
    assert (config.root, config.source, config.device) == (project, project / "pyproject.toml", "cpu")
    assert config.kernels_path == project / "store" / "kernels"
    assert config.describe() == (f"{project / 'pyproject.toml'} [tool.kernelopt]; "
                                 f"kernel store {project / 'store' / 'kernels'}")
    assert config.describe(tmp_path / "other").endswith(f"kernel store {tmp_path / 'other'} (--kernels-dir)")
    # A relative problem path is taken from the cwd, and the settings still from its project.
    monkeypatch.chdir(project / "models")
    assert config_for_problem(Path("deep/x.py")).source == project / "pyproject.toml"


def test_without_settings_the_nearest_pyproject_is_the_root(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    write(proj / "pyproject.toml", '[project]\nname = "proj"\n')
    problem = write(proj / "models" / "x.py", "")
    config = config_for_problem(problem)
    assert (config.root, config.source, config.device, config.problems) == (proj, None, "auto", [])
    assert config.kernels_path == proj / "kernels"
    assert config.describe().startswith(f"defaults, no [tool.kernelopt] found (root {proj})")


def test_without_any_pyproject_the_problems_folder_is_the_root(tmp_path: Path) -> None:
    if any((p / "pyproject.toml").is_file() for p in tmp_path.parents):
        pytest.skip("a pyproject.toml above the temp folder")
    problem = write(tmp_path / "models" / "x.py", "")
    config = config_for_problem(problem)
    assert (config.root, config.kernels_path) == (tmp_path / "models", tmp_path / "models" / "kernels")


def test_without_any_pyproject_a_git_repositorys_top_is_the_root_for_every_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repository without pyproject.toml (setup.py, requirements.txt): tune given models/x.py and the gate
    run from the top must use one kernel store (tune once stored under models/, the gate looked at the top)."""
    if any((p / "pyproject.toml").is_file() or (p / ".git").exists() for p in tmp_path.parents):
        pytest.skip("a pyproject.toml or a git tree above the temp folder")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    problem = write(repo / "models" / "deep" / "x.py", "")
    from pytest_kernelopt.config import kernels_folder, runs_folder

    for config in (config_for_problem(problem), load_config(repo), load_config(repo / "models")):
        assert config.root == repo and config.source is None
        assert kernels_folder(config) == repo / "kernels" and runs_folder(config) == repo / ".kernelopt" / "runs"
    write(repo / "models" / "pyproject.toml", '[project]\nname = "models"\n')  # a pyproject still comes first
    assert config_for_problem(problem).root == repo / "models"


def test_explicit_config_wins(project: Path, tmp_path: Path) -> None:
    other = write(tmp_path / "ci" / "kernelopt.toml", '[tool.kernelopt]\nkernels_dir = "k"\n')
    config = config_for_problem(project / "models" / "deep" / "x.py", config=other)
    assert (config.source, config.kernels_path, config.device) == (other, tmp_path / "ci" / "k", "auto")
    bare = write(tmp_path / "bare" / "pyproject.toml", '[project]\nname = "bare"\n')
    config = config_for_problem(project / "models" / "deep" / "x.py", config=bare)
    assert (config.source, config.root) == (None, bare.parent)


@pytest.mark.parametrize("name, words", [("missing.toml", "does not exist"), ("folder", "is not a file")])
def test_explicit_config_must_exist(tmp_path: Path, name: str, words: str) -> None:
    (tmp_path / "folder").mkdir()
    with pytest.raises(UsageError) as err:
        config_for_problem(tmp_path / "x.py", config=tmp_path / name)
    assert str(tmp_path / name) in str(err.value) and words in str(err.value)


def test_load_config_prefers_a_pyproject_with_settings(project: Path) -> None:
    # pytest's rootdir may be a folder whose own pyproject.toml has no [tool.kernelopt].
    config = load_config(project / "models")
    assert (config.source, config.kernels_path) == (project / "pyproject.toml", project / "store" / "kernels")
    assert config.problem_files() == [(project / "models" / "deep" / "x.py").resolve()]


@pytest.mark.parametrize(
    "section, key, words",
    [
        ('[tool.kernelopt]\nkernel_dir = "kernels"\n', "kernel_dir", "unknown key"),
        ('[tool.kernelopt]\nroot = "elsewhere"\n', "root", "unknown key"),
        ('[tool.kernelopt]\nsource = "x"\n', "source", "unknown key"),
        ('[tool.kernelopt]\ndevice = "gpu"\n', "device", "must be one of auto, cuda, cpu, not 'gpu'"),
        ('[tool.kernelopt]\ndevice = 1\n', "device", "must be one of auto, cuda, cpu"),
        ('[tool.kernelopt]\nproblems = "models/*.py"\n', "problems", "not a string"),
        ('[tool.kernelopt]\nproblems = ["a.py", 3]\n', "problems[1]", "must be a non-empty glob string, not 3"),
        ('[tool.kernelopt]\nproblems = {a = 1}\n', "problems", "not dict"),
        ('[tool.kernelopt]\nkernels_dir = 3\n', "kernels_dir", "must be a non-empty string"),
        ('[tool.kernelopt]\nkernels_dir = ""\n', "kernels_dir", "must be a non-empty string"),
        ("[tool]\nkernelopt = 3\n", "[tool.kernelopt]", "must be a table"),
        ("[tool.kernelopt\ndevice = 'cpu'\n", "", "not valid TOML"),
    ],
    ids=["unknown_key", "root_key", "source_key", "bad_device", "device_not_a_string", "problems_a_string",
         "problems_item_not_a_string", "problems_a_table", "kernels_dir_not_a_string", "kernels_dir_empty",
         "section_not_a_table", "bad_toml"],
)
def test_invalid_settings_are_one_line_naming_file_and_key(tmp_path: Path, section: str, key: str, words: str) -> None:
    pyproject = write(tmp_path / "pyproject.toml", section)
    problem = write(tmp_path / "models" / "x.py", "")
    for load in (lambda: load_config(tmp_path), lambda: config_for_problem(problem),
                 lambda: config_for_problem(problem, config=pyproject)):
        with pytest.raises(UsageError) as err:
            load()
        message = str(err.value)
        assert message.startswith(f"{pyproject}: ") and key in message and words in message
        assert "\n" not in message


def test_every_surface_resolves_the_projects_folders_alike(project: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel store and the runs folder, as the command line (from the problem file), the gate (from the
    rootdir), the gate's tune, and the runtime (from a subfolder) see them: one rule, one answer."""
    from types import SimpleNamespace

    from pytest_kernelopt.config import kernels_folder, runs_folder
    from pytest_kernelopt.gate.tuning import Tuning
    from pytest_kernelopt.store.production import _kernels_path

    store, runs = (project / "store" / "kernels").resolve(), (project / ".kernelopt" / "runs").resolve()
    problem = project / "models" / "deep" / "x.py"
    cli, gate = config_for_problem(problem), load_config(project)
    monkeypatch.chdir(project / "models" / "deep")
    assert cli.kernels_path == gate.kernels_path == kernels_folder(cli) == kernels_folder(None) == store
    assert _kernels_path(None) == store  # pytest_kernelopt.compile(model) without kernels_dir
    assert cli.runs_path == runs_folder(gate) == runs_folder(None) == runs
    assert Tuning(SimpleNamespace(), gate, "cpu", lambda: None, None).runs_dir == runs
    assert f"kernel store {store}" in cli.describe()
    # A folder given as an argument (--kernels-dir, --runs-dir, compile(kernels_dir=...)): from the current folder.
    monkeypatch.chdir(tmp_path)
    for given in ("elsewhere", tmp_path / "elsewhere"):
        assert kernels_folder(cli, given) == _kernels_path(given) == runs_folder(gate, given) == tmp_path / "elsewhere"
    assert f"kernel store {tmp_path / 'elsewhere'} (--kernels-dir)" in cli.describe(Path("elsewhere"))


def test_no_module_resolves_the_projects_folders_itself() -> None:
    """The default runs folder is written in config.py alone, and no module roots kernels_dir itself."""
    package = Path(__file__).resolve().parents[1] / "pytest_kernelopt"
    for path in package.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name == "config.py" and path.parent == package:
            continue
        assert '".kernelopt"' not in text and "root / settings.kernels_dir" not in text, path
        assert "kernels_path).resolve()" not in text, path

"""`sim3d import megatron -- ARGS...`, `sim3d import nemo RECIPE.yaml` and `sim3d import torchtitan
CONFIG.toml`: write a scenario
from the configuration a user already has (sim3d/scenario/importers.py, nemo_import.py, torchtitan.py), and say what was not mapped
and what was assumed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .support import JSON_HELP, BadInput, _print_json, _writable_file, guarded, say

import_app = typer.Typer(no_args_is_help=True, help="Write a scenario from a Megatron-LM command line, a NeMo "
                                                    "training YAML or a torchtitan train config.")

GPU_HELP = "GPU preset of the cluster (a100-40gb, a100-80gb, h100-sxm, h200, ...)."
GPUS_HELP = "GPUs of the run (default: tp x pp x cp, i.e. one data-parallel replica)."


def _emit(imported, source: str, out: Optional[Path], as_json: bool, force: bool = False) -> None:
    """`source`: what was imported (a file, or "megatron arguments"), named in any refusal."""
    import yaml

    from ..errors import ScenarioError
    from ..scenario.load import scenario_from_dict
    try:
        scenario_from_dict(imported.scenario)  # refuse (exit 2) what would not load as written
    except ScenarioError as e:
        raise BadInput(f"{source}: its scenario would not load: {e}") from None
    text = yaml.safe_dump(imported.scenario, sort_keys=False)
    notes = [f"not mapped: {u}" for u in imported.unmapped] + [f"assumed: {a}" for a in imported.assumed]
    if as_json:
        _print_json({"scenario": imported.scenario, "not_mapped": imported.unmapped, "assumed": imported.assumed,
                     "path": str(out) if out else None})
    if out is not None:
        _writable_file(out, "--out", (".yaml", ".yml"))
        if out.exists() and Path(source).exists() and out.samefile(source):  # a link to it is it too
            raise BadInput(f"--out {out}: is the file imported from; the scenario would replace the config it "
                           "was read from (--force does not change that)")
        if out.exists() and not force:  # `import nemo X.yaml --out X.yaml` would replace the user's config
            raise BadInput(f"--out {out}: exists; sim3d import replaces a file only with --force")
        from ..util.safe_files import refuse_unsafe, write_bytes
        refuse_unsafe([out])  # a link, FIFO or folder there is refused, never written through
        write_bytes(out, ("# written by `sim3d import`\n" + "".join(f"# {n}\n" for n in notes) + text).encode())
    elif not as_json:
        print(text, end="")
    if not as_json:
        for note in notes:
            say(note.split(":")[0] + ":", note.split(": ", 1)[1], "yellow")
        if out is not None:
            say("wrote", f"{out} (sim3d run {out})", "green")


def _check_gpu(gpu: str) -> None:
    from ..cluster.gpus import PRESETS
    if gpu not in PRESETS:
        raise BadInput(f"--gpu {gpu!r}: expected one of {', '.join(sorted(PRESETS))}")


@import_app.command()
@guarded
def megatron(args: list[str] = typer.Argument(..., help="pretrain_gpt.py arguments, after `--`."),
             gpu: str = typer.Option(..., "--gpu", help=GPU_HELP),
             gpus: Optional[int] = typer.Option(None, "--gpus", min=1, help=GPUS_HELP),
             gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs per server of the cluster."),
             name: str = typer.Option("megatron-import", "--name", help="Scenario name."),
             out: Optional[Path] = typer.Option(None, "--out", help="Write the scenario here (default: stdout)."),
             force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
             as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """A scenario from a Megatron-LM command line:
    `sim3d import megatron --gpu a100-80gb --gpus 1024 -- --num-layers 96 ...`."""
    from ..scenario.importers import from_megatron
    _check_gpu(gpu)
    try:
        imported = from_megatron(args, name=name, gpu=gpu, gpus=gpus, gpus_per_node=gpus_per_node)
    except ValueError as e:
        raise BadInput(f"megatron arguments: {e}") from None
    _emit(imported, "megatron arguments", out, as_json, force)


@import_app.command()
@guarded
def nemo(recipe: Path = typer.Argument(..., help="NeMo training YAML (trainer: and model: sections)."),
         gpu: str = typer.Option(..., "--gpu", help=GPU_HELP),
         gpus: Optional[int] = typer.Option(None, "--gpus", min=1, help="GPUs (default: trainer.num_nodes x devices)."),
         name: Optional[str] = typer.Option(None, "--name", help="Scenario name (default: the file's stem)."),
         out: Optional[Path] = typer.Option(None, "--out", help="Write the scenario here (default: stdout)."),
         force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
         as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """A scenario from a NeMo training config (the megatron_gpt_config.yaml layout)."""
    from ..scenario.nemo_import import from_nemo
    from ..scenario.load import read_scenario_yaml
    _check_gpu(gpu)
    config = read_scenario_yaml(recipe)  # the same strict reading as a scenario file
    try:
        imported = from_nemo(config, name=name or recipe.stem, gpu=gpu, gpus=gpus)
    except ValueError as e:
        raise BadInput(f"{recipe}: {e}") from None
    _emit(imported, str(recipe), out, as_json, force)


@import_app.command()
@guarded
def torchtitan(config: Path = typer.Argument(..., help="torchtitan train config (TOML)."),
               gpu: str = typer.Option(..., "--gpu", help=GPU_HELP),
               gpus: Optional[int] = typer.Option(None, "--gpus", min=1,
                                                  help="GPUs of the run (needed when data_parallel_shard_degree is -1)."),
               gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs per server of the cluster."),
               name: Optional[str] = typer.Option(None, "--name", help="Scenario name (default: the file's stem)."),
               out: Optional[Path] = typer.Option(None, "--out", help="Write the scenario here (default: stdout)."),
               force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
               as_json: bool = typer.Option(False, "--json", help=JSON_HELP)):
    """A scenario from a torchtitan train config: `sim3d import torchtitan llama3_70b.toml --gpu h100-sxm --gpus 64`."""
    from ..scenario.torchtitan import from_torchtitan, read_toml
    _check_gpu(gpu)
    try:
        imported = from_torchtitan(read_toml(config), name=name or config.stem, gpu=gpu, gpus=gpus,
                                   gpus_per_node=gpus_per_node)
    except ValueError as e:
        raise BadInput(f"{config}: {e}") from None
    _emit(imported, str(config), out, as_json, force)

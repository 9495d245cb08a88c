"""What eval's command modules share: the settings the flags name, and JSON on stdout."""
from __future__ import annotations

import argparse
import json

from engine.core.settings import Settings, load_settings


def _settings(args: argparse.Namespace) -> Settings:
    profile = getattr(args, "profile", None)
    return load_settings(args.config, **({"profile": profile} if profile else {}))


def _print(obj) -> None:
    print(json.dumps(obj, indent=2, default=str))

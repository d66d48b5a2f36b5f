"""``python -m gateway.config --markdown``: the option list for docs/options.md."""

import sys

from gateway.config import GatewayConfig
from gateway.config.table import markdown

if sys.argv[1:] == ["--markdown"]:
    print(markdown(GatewayConfig))
else:
    raise SystemExit("usage: python -m gateway.config --markdown")

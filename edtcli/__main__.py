from __future__ import annotations

from edtcli.cli import main

raise SystemExit(main())

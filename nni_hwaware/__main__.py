from nni_hwaware.cli import main

raise SystemExit(main())

from nni_hwaware.trial.run import main

raise SystemExit(main())

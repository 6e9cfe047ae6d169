import sys

from launcher.agent.verbs import main

sys.exit(main())

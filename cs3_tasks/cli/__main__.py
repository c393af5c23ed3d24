import sys

from cs3_tasks.cli import main

sys.exit(main())

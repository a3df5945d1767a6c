"""``python -m trainer CONFIG [--a.b v ...]``: run the bundled trainer (under torchrun, srun, or alone)."""

from trainer.launch import main

if __name__ == "__main__":
    main()

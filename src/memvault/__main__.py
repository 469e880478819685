from memvault.cli import main

# Guarded: a helper process (multiprocessing's spawn) imports this module again.
if __name__ == "__main__":
    main()

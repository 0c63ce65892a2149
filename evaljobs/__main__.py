from evaljobs.cli import main

main(prog_name="evaljobs")

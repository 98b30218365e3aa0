"""Teaching demos: `disttrace demo NAME` runs a program of demos/programs/ under the tracer and narrates it."""

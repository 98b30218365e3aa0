"""Lines of a job script found by their tags: a job marks a line with a trailing comment `# <tag>`, and its ground
truth names the line by the tag (sites are asserted as file:line, which an edit of the job must not break)."""


def line(path: str, tag: str) -> int:
    """The line of the file at `path` that ends with the comment `# <tag>`."""
    with open(path) as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# <{tag}>"))

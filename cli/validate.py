"""`jetway validate -f FILE...`: offline admission, one line per problem (contracts/admission.py `judge`, knowing
nothing but the manifest: what is stored and the providers are the server's to judge)."""

from __future__ import annotations

import sys
from typing import TextIO

from cli.manifests import Unreadable, expand_sources, load_documents
from contracts.admission import judge

EXIT_OK, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


def label(kind: str | None, name: str | None, index: int) -> str:
    return f"{kind or '(unknown kind)'}/{name if name else f'(document {index})'}"


def run(files: list[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    unreadable = invalid = documents = 0
    for source in expand_sources(files):
        try:
            docs = load_documents(source)
        except Unreadable as exc:
            print(f"error: {exc}", file=err)
            unreadable += 1
            continue
        if not docs:
            print(f"{source}: contains no manifests", file=out)
            invalid += 1
            continue
        for doc in docs:
            documents += 1
            verdict = judge(doc.body)
            where = f"{source}: {label(verdict.kind, verdict.name, doc.index)}"
            for warning in verdict.warnings:
                print(f"{where}: warning: {warning}", file=err)
            if verdict.problems:
                invalid += 1
                for problem in verdict.problems:
                    print(f"{where}: {problem}", file=out)
    if unreadable:
        return EXIT_UNREADABLE
    if invalid:
        print(f"{invalid} of {documents} manifests have problems", file=err)
        return EXIT_INVALID
    print(f"{documents} manifest{'s' if documents != 1 else ''} valid", file=err)
    return EXIT_OK

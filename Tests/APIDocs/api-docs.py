#!/usr/bin/env python3
"""Writes docs/api.md, the reference of every public symbol of AskModel, AskClient, AskRelayCluster and
AskRelayTesting, from the built modules (`make api-docs`).

The public interface is read with swift-symbolgraph-extract (shipped with the toolchain) from the debug build's
.swiftmodule files, so the modules must be built first (`swift build --build-tests`, or `make api-docs`, which
builds them). Nothing is compiled and nothing is fetched: extracting the four modules takes a few seconds.

What is listed: every public or open type, initializer, method, property, subscript, enum case, type alias,
protocol requirement and top-level function or value of the four modules, members under their type, with their
declaration and the first paragraph of their doc comment. What is left out: members the compiler synthesizes or
that a type only inherits from a protocol extension (`!=`, `hashValue`, `init(from:)` of a derived `Codable`
conformance, `init(rawValue:)` of a raw-value enum, a protocol's default implementation seen on each conforming
type); the conformances say those exist.

PackageLayoutTests' APIReferenceTests runs this script into a temporary file and compares the symbols of both
pages, so a public symbol added without regenerating the page fails the test.

Usage: api-docs.py [--modules-dir DIR] [--output FILE] [--target TRIPLE] [--missing-docs]
  --modules-dir   the build's Modules folder (default: .build/debug/Modules of this checkout)
  --output        the page to write (default: docs/api.md of this checkout; - for standard output)
  --target        the target triple of the build (default: the host's)
  --missing-docs  also list, on standard error, every listed symbol without a doc comment of its own
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The library products' modules, in the order of the page (each builds on the ones before it).
MODULES = [
    ("AskBasics", "the duration grammar, value bounds and OneShot, which AskModel re-exports (its other helpers are package"
     " access)"),
    ("AskModel", "the PermissionKit-shaped model: questions, choices, responses, topics, limits, errors"),
    ("AskClient", "the client: AskCenter, ContactApprovals, CommunicationLimits queries, GuardianCenter"),
    ("AskRelayCluster", "the cluster harness: real askrelay processes for a test or a tool"),
    ("AskRelayTesting", "Swift Testing support: the `.askRelayCluster()` trait, expectations with deadlines"),
]

TYPE_KINDS = {"swift.struct", "swift.class", "swift.enum", "swift.protocol", "swift.actor"}

# The order of members under a type: cases, then how a value is made, then what it has and does.
MEMBER_ORDER = [
    "swift.enum.case",
    "swift.associatedtype",
    "swift.typealias",
    "swift.init",
    "swift.type.property",
    "swift.type.method",
    "swift.type.subscript",
    "swift.property",
    "swift.method",
    "swift.subscript",
    "swift.func.op",
    "swift.func",
    "swift.var",
    "swift.deinit",
]

# Marker protocols every type of the language has or that only the compiler uses: not worth a reader's time.
UNLISTED_CONFORMANCES = {"Copyable", "Escapable", "BitwiseCopyable", "SendableMetatype"}

# A doc comment's callouts (`- Parameter x:`, `- Throws:`) end its summary.
CALLOUT = re.compile(
    r"^- (Parameters?|Returns|Throws|Note|Precondition|Postcondition|Important|Warning|Complexity)\b", re.IGNORECASE
)

KIND_WORDS = {
    "swift.struct": "structure",
    "swift.class": "class",
    "swift.enum": "enumeration",
    "swift.protocol": "protocol",
    "swift.actor": "actor",
}


def extract(module, modules_dir, out_dir, target):
    """Runs swift-symbolgraph-extract for one module; returns the symbol graph files it wrote."""
    build_dir = os.path.dirname(modules_dir)
    tool = shutil.which("swift-symbolgraph-extract")
    if tool is None:
        sys.exit("api-docs: no swift-symbolgraph-extract on PATH (the Swift toolchain has it, next to swift)")
    command = [
        tool,
        "-module-name",
        module,
        "-I",
        modules_dir,
        "-minimum-access-level",
        "public",
        "-output-dir",
        out_dir,
    ]
    if target:
        command += ["-target", target]
    cache = os.path.join(build_dir, "ModuleCache")
    if os.path.isdir(cache):
        command += ["-module-cache-path", cache]
    # The C modules below the Swift ones (CZeroMQ, CSQLite: system library targets; CFaultVFS: SwiftPM writes its
    # module map into the build folder), as the compiler was given them.
    maps = []
    sources = os.path.join(ROOT, "Sources")
    for name in sorted(os.listdir(sources)):
        maps.append(os.path.join(sources, name, "module.modulemap"))
    for name in sorted(os.listdir(build_dir)):
        if name.endswith(".build"):
            maps.append(os.path.join(build_dir, name, "module.modulemap"))
    for path in maps:
        if os.path.isfile(path):
            command += ["-Xcc", "-fmodule-map-file=" + path]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(
            "api-docs: swift-symbolgraph-extract failed for %s (are the modules built? run "
            "`swift build --build-tests`):\n%s%s" % (module, result.stdout, result.stderr)
        )
    return sorted(
        os.path.join(out_dir, name)
        for name in os.listdir(out_dir)
        if name == module + ".symbols.json" or name.startswith(module + "@")
    )


def declaration(symbol):
    """The declaration as one line: the spellings of its fragments, white space collapsed."""
    text = "".join(fragment["spelling"] for fragment in symbol.get("declarationFragments", []))
    return re.sub(r"\s+", " ", text).strip()


def summary(symbol):
    """The first paragraph of the doc comment, as one line, and whether the comment is the symbol's own."""
    comment = symbol.get("docComment")
    if not comment:
        return "", False
    paragraph = []
    for line in comment.get("lines", []):
        text = line["text"].strip()
        if CALLOUT.match(text):
            break
        if not text:
            if paragraph:
                break
            continue
        paragraph.append(text)
    return " ".join(paragraph), True


def escape(text):
    """Doc comment text for the page: a DocC link ``Type/member`` as code `Type.member`, and `<` outside code spans
    escaped, so `Set<String>` is not read as HTML."""
    text = re.sub(r"``([^`]+)``", lambda match: "`" + match.group(1).replace("/", ".") + "`", text)
    parts = re.split(r"(`+[^`]*`+)", text)
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;") for part in parts)


def code(text):
    """An inline code span that holds `text` even when it has backticks (an escaped identifier)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    if longest:
        return "%s %s %s" % (fence, text, fence)
    return fence + text + fence


def load(module, files):
    """The module's listed symbols and their relationships, from its symbol graph files."""
    symbols = {}
    relationships = []
    extended = {}  # path of an extended type of another module -> that module
    for path in files:
        with open(path) as handle:
            graph = json.load(handle)
        relationships += graph.get("relationships", [])
        for symbol in graph["symbols"]:
            precise = symbol["identifier"]["precise"]
            if "::SYNTHESIZED::" in precise:
                continue  # inherited from a protocol extension or a superclass: documented where it is declared
            if "location" not in symbol:
                continue  # made by the compiler (a derived conformance's init(from:), init(rawValue:))
            symbols[precise] = symbol
            extension = symbol.get("swiftExtension", {}).get("extendedModule")
            if extension and extension != module:
                extended[tuple(symbol["pathComponents"][:-1])] = extension
    return symbols, relationships, extended


def render(modules_dir, target, missing_docs):
    sections = []
    counts = []
    missing = []
    with tempfile.TemporaryDirectory(prefix="api-docs-") as out:
        for module, about in MODULES:
            folder = os.path.join(out, module)
            os.mkdir(folder)
            symbols, relationships, extended = load(module, extract(module, modules_dir, folder, target))
            section, listed = render_module(module, about, symbols, relationships, extended)
            sections.append(section)
            counts.append((module, listed))
            for symbol in symbols.values():
                if "docComment" not in symbol:
                    missing.append(
                        "%s.%s (%s:%d)"
                        % (
                            module,
                            ".".join(symbol["pathComponents"]),
                            os.path.relpath(symbol["location"]["uri"].removeprefix("file://"), ROOT),
                            symbol["location"]["position"]["line"] + 1,
                        )
                    )
    if missing_docs:
        for line in sorted(missing):
            print("no doc comment: " + line, file=sys.stderr)
    total = sum(count for _, count in counts)
    intro = [
        "# API reference",
        "",
        "Every public symbol of the four library modules a Swift package uses: **AskModel** (the model),",
        "**AskClient** (the client), **AskRelayCluster** (the cluster harness) and **AskRelayTesting** (Swift Testing",
        "support), per module and per type, each with its declaration and the first paragraph of its doc comment;",
        "first **AskBasics**, whose public symbols (the duration grammar, `ValueBounds`, `OneShot`) AskModel re-exports.",
        "How the products fit together and a tutorial are in [testing.md](testing.md); the wire and the processes in",
        "[protocol.md](protocol.md) and [architecture.md](architecture.md). The modules these re-export (AskProtocol,",
        "AskKeys, AskLogging) are not listed here.",
        "",
        "This page is generated: `make api-docs` builds the modules and runs `Tests/APIDocs/api-docs.py`, which reads",
        "their public interface with `swift-symbolgraph-extract` from the debug build. Do not edit it by hand. A test",
        "(`APIReferenceTests` in Tests/PackageLayoutTests) extracts the same symbols in `make test` and fails, naming",
        "them, when a public symbol is missing here or a symbol listed here no longer exists (it compares",
        "declarations, not the doc comments' summaries): after changing a public declaration or its doc comment, run",
        "`make api-docs` and commit the page with the change.",
        "",
        "Members the compiler synthesizes or that a type only inherits from a protocol extension (`!=`, `hashValue`,",
        "the `init(from:)` of a derived `Codable` conformance, `init(rawValue:)`) are not listed; each type's",
        "conformances say they exist. A protocol's members are marked *requirement* (*with a default implementation*",
        "when the protocol's extension provides one) or *default implementation* (a member only an extension has).",
        "",
        "| module | public symbols |",
        "|---|---|",
    ]
    for module, count in counts:
        intro.append("| [%s](#%s) | %d |" % (module, module.lower(), count))
    intro.append("| total | %d |" % total)
    return "\n".join(intro) + "\n\n" + "\n\n".join(sections) + "\n", counts, len(missing)


def render_module(module, about, symbols, relationships, extended):
    by_path = {tuple(symbol["pathComponents"]): symbol for symbol in symbols.values()}
    names = {precise: ".".join(symbol["pathComponents"]) for precise, symbol in symbols.items()}
    role = {}
    defaults = {}  # a default implementation -> the requirement it implements
    conformances = {}
    for relation in relationships:
        source, target, kind = relation["source"], relation["target"], relation["kind"]
        if kind in ("requirementOf", "optionalRequirementOf"):
            role[source] = "requirement" if kind == "requirementOf" else "optional requirement"
        elif kind == "defaultImplementationOf":
            defaults[source] = target
        elif kind == "conformsTo":
            name = names.get(target) or relation.get("targetFallback", target).split(".")[-1]
            if name in UNLISTED_CONFORMANCES:
                continue
            conformances.setdefault(source, set()).add(name)

    # A default implementation declared as its requirement is one line: the requirement's, which says it has one.
    folded = set()
    for source, target in defaults.items():
        if source not in symbols or source in role:
            continue
        requirement = symbols.get(target)
        implementation = symbols[source]
        same = requirement is not None and (
            requirement["pathComponents"] == implementation["pathComponents"]
            and declaration(requirement) == declaration(implementation)
        )
        if same:
            folded.add(source)
            role[target] = role.get(target, "requirement") + ", with a default implementation"
        else:
            role[source] = "default implementation"

    # Types (and the external types extended), each with the members whose parent it is.
    groups = {}
    for precise, symbol in symbols.items():
        if precise in folded:
            continue
        path = tuple(symbol["pathComponents"])
        if symbol["kind"]["identifier"] in TYPE_KINDS:
            groups.setdefault(path, [])
        else:
            groups.setdefault(path[:-1], []).append(precise)

    lines = ["## %s" % module, "", "%s%s." % (about[0].upper(), about[1:])]
    for path in sorted(groups, key=lambda p: ([c.lower() for c in p], p)):
        members = groups[path]
        lines.append("")
        if not path:
            lines.append("### Top-level functions and values")
        else:
            dotted = ".".join(path)
            owner = by_path.get(path)
            if owner is not None:
                lines.append("### %s" % code(dotted))
                lines.append("")
                kind = KIND_WORDS.get(owner["kind"]["identifier"], owner["kind"]["displayName"].lower())
                lines.append("%s *(%s)*" % (code(declaration(owner)), kind))
                text, _ = summary(owner)
                if text:
                    lines.append("")
                    lines.append(escape(text))
                conforms = sorted(conformances.get(owner["identifier"]["precise"], set()))
                if conforms:
                    lines.append("")
                    lines.append("Conforms to " + ", ".join(code(name) for name in conforms) + ".")
            else:
                lines.append("### %s (extension)" % code(dotted))
                lines.append("")
                origin = extended.get(path)
                where = " of %s" % code(origin) if origin else ""
                lines.append("%s adds these members to %s%s." % (module, code(dotted), where))
        if members:
            lines.append("")

        def order(precise):
            symbol = symbols[precise]
            kind = symbol["kind"]["identifier"]
            rank = MEMBER_ORDER.index(kind) if kind in MEMBER_ORDER else len(MEMBER_ORDER)
            return (rank, symbol["names"]["title"].lower(), declaration(symbol), precise)

        for precise in sorted(members, key=order):
            symbol = symbols[precise]
            entry = "- " + code(declaration(symbol))
            if precise in role:
                entry += " *(%s)*" % role[precise]
            text, _ = summary(symbol)
            if text:
                entry += " — " + escape(text)
            lines.append(entry)
    return "\n".join(lines), len(symbols) - len(folded)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules-dir", default=os.path.join(ROOT, ".build", "debug", "Modules"))
    parser.add_argument("--output", default=os.path.join(ROOT, "docs", "api.md"))
    parser.add_argument("--target", default=None, help="the target triple (default: the host's)")
    parser.add_argument("--missing-docs", action="store_true")
    arguments = parser.parse_args()
    modules_dir = os.path.realpath(arguments.modules_dir)
    if not os.path.isdir(modules_dir):
        sys.exit("api-docs: no %s; build the modules first (`swift build --build-tests`)" % modules_dir)
    page, counts, undocumented = render(modules_dir, arguments.target, arguments.missing_docs)
    if arguments.output == "-":
        sys.stdout.write(page)
    else:
        with open(arguments.output, "w") as handle:
            handle.write(page)
        print(
            "api-docs: wrote %s: %s; %d without a doc comment (--missing-docs lists them)"
            % (
                os.path.relpath(arguments.output),
                ", ".join("%s %d" % count for count in counts),
                undocumented,
            )
        )


if __name__ == "__main__":
    main()

"""The refind benchmark's queries (eval/refind.py), written by hand on 2026-12-03 before any ranking
change was tried on them, one page meant each. None of them is a query of the first refind test.

- vague: the searcher's own words — no content word of the page's title (the names of the three
  sites, python / sqlite / postgres, excepted: people say which site they were on), and often words
  that never occur on the page;
- exact: a term the page is about, as written on it;
- url: the page's address pasted back, changed as people change it (scheme, case, www, a trailing
  slash, a #fragment, a tracking parameter);
- site: a bare domain or a URL prefix — the page wanted is the most recently seen one under it;
- recent: words that fit several *different* pages about equally (sibling pages of one section, one
  topic over several pages) — the page wanted is the one of them seen most recently;
- hub (added 2026-12-07, issue 73, written before any page-level ranking change was tried on them):
  vague words (as vague ones: none of the title's content words) for a page that a page which *lists
  everything* also touches — a chapter's table of contents, an API index, the deprecated modules'
  chapter, the SQL commands' list, a changelog, a tutorial's tour of many modules (HUB_PAGES below,
  labelled by hand by what the page is, not by how it ranks). Each names the hub it was written against.

Paths are relative to the three sites (PY, PG, LITE below); a "recent" query names its group.
"""
from __future__ import annotations

PY, PG, LITE = "https://docs.python.org/3.11/", "https://www.postgresql.org/docs/15/", "https://www.sqlite.org/"

VAGUE: list[tuple[str, str]] = [
    ("tell whether two folders hold the same stuff", PY + "library/filecmp.html"),
    ("run some cleanup code when my python program ends", PY + "library/atexit.html"),
    ("benchmark a one-liner to see how fast it is in python", PY + "library/timeit.html"),
    ("postgres physically reorder a table's rows following an index", PG + "sql-cluster.html"),
    ("how sqlite behaves with simultaneous readers and writers on one database", LITE + "isolation.html"),
    ("make sqlite queries burn fewer processor cycles", LITE + "cpu.html"),
    ("compare two sqlite files and print the sql that turns one into the other", LITE + "sqldiff.html"),
    ("python sign data with a secret so tampering is detected", PY + "library/hmac.html"),
    ("guess the content kind of an attachment from its file extension", PY + "library/mimetypes.html"),
    ("thread safe fifo for handing work from producers to consumers", PY + "library/queue.html"),
    ("loop through the contents of many text files as if they were one", PY + "library/fileinput.html"),
    ("insert into a sorted python list keeping it ordered", PY + "library/bisect.html"),
    ("sqlite insert a row or change it when it already exists", LITE + "lang_upsert.html"),
    ("reasons sqlite chose its programming language", LITE + "whyc.html"),
    ("find out where python died on a segmentation fault", PY + "library/faulthandler.html"),
    ("faster sqlite reads by letting the os page the database file in directly", LITE + "mmap.html"),
    ("sqlite plugins in a shared library added after startup", LITE + "loadext.html"),
    ("speed up sqlite lookups on lower(name)", LITE + "expridx.html"),
    ("postgres wait for notifications on a channel", PG + "sql-listen.html"),
    ("python work with subnets and ipv4 or ipv6 hosts", PY + "howto/ipaddress.html"),
    ("obey a site's rules about which urls a crawler may fetch", PY + "library/urllib.robotparser.html"),
    ("what sqlite does when an insert breaks a unique rule: abort, ignore or replace", LITE + "conflict.html"),
    ("press tab to finish identifiers in the python shell", PY + "library/rlcompleter.html"),
    ("how .pyc files store compiled code", PY + "library/marshal.html"),
    ("what broke when upgrading sqlite to 3.6", LITE + "35to36.html"),
    ("postgres impersonate another role for the current connection", PG + "sql-set-session-authorization.html"),
    ("postgres delete all objects belonging to a role before removing it", PG + "sql-drop-owned.html"),
    ("postgres run an anonymous code block without creating a function", PG + "sql-do.html"),
    ("postgres block other sessions from writing to a table while I work", PG + "sql-lock.html"),
    ("postgres upsert rows from a source table into a target in one statement", PG + "sql-merge.html"),
    ("postgres show the execution plan with estimated costs", PG + "sql-explain.html"),
    ("when is sqlite a good fit and when to pick a client/server database", LITE + "whentouse.html"),
    ("the one big c file you compile sqlite from", LITE + "amalgamation.html"),
    ("sqlite mark a udf as pure so it may be used in indexes", LITE + "deterministic.html"),
    ("list a source file's classes and methods without running it", PY + "library/pyclbr.html"),
    ("prompt for a secret in the terminal without showing the keystrokes", PY + "library/getpass.html"),
    ("turn a long string into lines of a fixed width", PY + "library/textwrap.html"),
    ("split a command line string the way a shell would", PY + "library/shlex.html"),
    ("python which os version and cpu architecture am I on", PY + "library/platform.html"),
    ("python cap how much memory or cpu time a process may use", PY + "library/resource.html"),
    ("build a little interactive shell with do_ methods", PY + "library/cmd.html"),
    ("postgres modify a row security rule", PG + "sql-alterpolicy.html"),
    ("sqlite be told when the connection blocking my shared cache finishes", LITE + "unlock_notify.html"),
    ("sqlite hook for the diagnostic messages it emits", LITE + "errlog.html"),
    ("use a sqlite database instead of a zip or tarball", LITE + "sqlar.html"),
    ("postgres integer bigint decimal sizes and precision", PG + "datatype-numeric.html"),
    ("attach a kernel tracer to the interpreter's function entry probes", PY + "howto/instrumentation.html"),
    ("state local to each asyncio task, like thread locals", PY + "library/contextvars.html"),
    ("how many kilobytes sqlite takes once compiled", LITE + "footprint.html"),
    ("how other engines compare when missing values meet unique and distinct", LITE + "nulls.html"),
    ("python count how often each object type is alive to hunt a leak", PY + "library/gc.html"),
    ("postgres case when coalesce nullif greatest", PG + "functions-conditional.html"),
]

EXACT: list[tuple[str, str]] = [
    ("SECURITY LABEL", PG + "sql-security-label.html"),
    ("IMPORT FOREIGN SCHEMA", PG + "sql-importforeignschema.html"),
    ("pg_event_trigger_ddl_commands", PG + "functions-event-triggers.html"),
    ("generate_series", PG + "functions-srf.html"),
    ("ALTER USER MAPPING", PG + "sql-alterusermapping.html"),
    ("CREATE CONVERSION", PG + "sql-createconversion.html"),
    ("ALTER TEXT SEARCH DICTIONARY", PG + "sql-altertsdictionary.html"),
    ("regclass", PG + "datatype-oid.html"),
    ("sys.path initialization", PY + "library/sys_path_init.html"),
    ("zipimporter", PY + "library/zipimport.html"),
    ("ossaudiodev", PY + "library/ossaudiodev.html"),
    ("xdrlib Packer", PY + "library/xdrlib.html"),
    ("stringprep", PY + "library/stringprep.html"),
    ("SQLITE_MEMSTAT", LITE + "memstat.html"),
    ("geopoly", LITE + "geopoly.html"),
    ("cksumvfs", LITE + "cksumvfs.html"),
    ("UINT collating sequence", LITE + "uintcseq.html"),
    ("generated columns", LITE + "gencol.html"),
    ("8+3 filenames", LITE + "shortnames.html"),
    ("audit events table", PY + "library/audit_events.html"),
    ("python development mode -X dev", PY + "library/devmode.html"),
    ("ensurepip", PY + "library/ensurepip.html"),
]

URL: list[tuple[str, str]] = [
    ("https://docs.python.org/3.11/library/heapq.html", PY + "library/heapq.html"),
    ("docs.python.org/3.11/library/bisect.html#bisect.insort", PY + "library/bisect.html"),
    ("HTTPS://WWW.SQLITE.ORG/lang_upsert.html", LITE + "lang_upsert.html"),
    ("http://sqlite.org/isolation.html", LITE + "isolation.html"),
    ("https://www.postgresql.org/docs/15/sql-merge.html?utm_source=newsletter", PG + "sql-merge.html"),
    ("www.postgresql.org/docs/15/functions-srf.html/", PG + "functions-srf.html"),
    ("docs.python.org/3.11/howto/sorting.html#key-functions", PY + "howto/sorting.html"),
    ("https://docs.python.org/3.11/tutorial/venv.html", PY + "tutorial/venv.html"),
    ("sqlite.org/lang_datefunc.html", LITE + "lang_datefunc.html"),
    ("https://www.postgresql.org/docs/15/datatype-numeric.html#DATATYPE-SERIAL", PG + "datatype-numeric.html"),
    ("http://docs.python.org/3.11/library/operator.html", PY + "library/operator.html"),
    ("https://www.sqlite.org/rowvalue.html#rowvalueeq", LITE + "rowvalue.html"),
    ("postgresql.org/docs/15/sql-createrole.html", PG + "sql-createrole.html"),
    ("https://docs.python.org/3.11/library/abc.html#abc.ABCMeta", PY + "library/abc.html"),
]

# (query, the domain or URL prefix the most recently seen page is wanted under)
SITE: list[tuple[str, str]] = [
    ("www.sqlite.org", "sqlite.org"),
    ("docs.python.org", "docs.python.org"),
    ("https://www.postgresql.org/", "postgresql.org"),
    ("docs.python.org/3.11/howto", "docs.python.org/3.11/howto"),
    ("docs.python.org/3.11/library/", "docs.python.org/3.11/library"),
    ("postgresql.org/docs/15/", "postgresql.org/docs/15"),
    ("https://docs.python.org/3.11/tutorial/", "docs.python.org/3.11/tutorial"),
    ("WWW.POSTGRESQL.ORG", "postgresql.org"),
    ("sqlite.org/", "sqlite.org"),
    ("python.org", "python.org"),
]

# (query, the pages it fits about equally: the one seen most recently is wanted)
RECENT: list[tuple[str, tuple[str, ...]]] = [
    ("postgres stored procedures", (PG + "sql-createprocedure.html", PG + "sql-dropprocedure.html", PG + "sql-call.html")),
    ("postgres materialized view", (PG + "sql-creatematerializedview.html", PG + "sql-altermaterializedview.html",
                                    PG + "sql-refreshmaterializedview.html")),
    ("postgres logical replication publication subscription", (PG + "sql-createpublication.html",
                                                              PG + "sql-createsubscription.html",
                                                              PG + "sql-dropsubscription.html")),
    ("postgres foreign tables", (PG + "sql-createforeigntable.html", PG + "sql-alterforeigntable.html",
                                 PG + "sql-importforeignschema.html")),
    ("postgres privileges on tables for a role", (PG + "sql-grant.html", PG + "sql-revoke.html",
                                                  PG + "sql-alterdefaultprivileges.html")),
    ("python sax parser", (PY + "library/xml.sax.html", PY + "library/xml.sax.handler.html",
                           PY + "library/xml.sax.reader.html")),
    ("read an audio file in python", (PY + "library/aifc.html", PY + "library/sunau.html", PY + "library/wave.html")),
    ("unix password database python", (PY + "library/pwd.html", PY + "library/spwd.html")),
    ("compress a file in python", (PY + "library/gzip.html", PY + "library/bz2.html")),
    ("sqlite virtual table", (LITE + "csv.html", LITE + "unionvtab.html", LITE + "memstat.html",
                              LITE + "vtablist.html")),
    ("sqlite rowid", (LITE + "rowidtable.html", LITE + "withoutrowid.html")),
    ("postgres network address inet cidr", (PG + "datatype-net-types.html", PG + "functions-net.html")),
    ("postgres enum", (PG + "datatype-enum.html", PG + "functions-enum.html")),
    ("postgres geometric point box circle", (PG + "datatype-geometric.html", PG + "functions-geometry.html")),
    ("postgres bit string", (PG + "datatype-bit.html", PG + "functions-bitstring.html")),
    ("postgres bytea binary", (PG + "datatype-binary.html", PG + "functions-binarystring.html")),
    ("postgres event trigger", (PG + "sql-createeventtrigger.html", PG + "functions-event-triggers.html")),
    ("importlib resources", (PY + "library/importlib.resources.html", PY + "library/importlib.resources.abc.html")),
    ("asyncio api index", (PY + "library/asyncio-api-index.html", PY + "library/asyncio-llapi-index.html")),
    ("brief tour of the standard library", (PY + "tutorial/stdlib.html", PY + "tutorial/stdlib2.html")),
    ("sqlite version numbers and releases", (LITE + "chronology.html", LITE + "versionnumbers.html")),
    ("curses extension python", (PY + "library/curses.ascii.html", PY + "library/curses.panel.html")),
    ("drop a function or procedure in postgres", (PG + "sql-dropfunction.html", PG + "sql-dropprocedure.html",
                                                  PG + "sql-droproutine.html")),
    ("alter a function postgres", (PG + "sql-alterfunction.html", PG + "sql-alterroutine.html")),
    ("compile sqlite from source", (LITE + "howtocompile.html", LITE + "amalgamation.html",
                                    LITE + "custombuild.html")),
    ("postgres view", (PG + "sql-createview.html", PG + "sql-alterview.html")),
    ("create or drop a database in postgres", (PG + "sql-createdatabase.html", PG + "sql-dropdatabase.html")),
    ("sqlite flexible typing of columns", (LITE + "datatypes.html", LITE + "flextypegood.html")),
    ("python xml dom", (PY + "library/xml.dom.minidom.html", PY + "library/xml.dom.pulldom.html")),
    ("postgres transaction isolation level", (PG + "sql-begin.html", PG + "sql-set-transaction.html")),
]

# (query, the page meant, the page that lists everything it was written against)
HUB_QUERIES: list[tuple[str, str, str]] = [
    ("python module for the audio format of old unix workstations", PY + "library/sunau.html",
     PY + "library/superseded.html"),
    ("look up a login's encrypted credential entry on linux as root from python", PY + "library/spwd.html",
     PY + "library/superseded.html"),
    ("python talk to a remote host over the old unencrypted terminal protocol", PY + "library/telnetlib.html",
     PY + "library/superseded.html"),
    ("python pack numbers in the network representation that nfs and rpc use", PY + "library/xdrlib.html",
     PY + "library/superseded.html"),
    ("python read the system config that says which viewer program opens each content type",
     PY + "library/mailcap.html", PY + "library/superseded.html"),
    ("python show a detailed report in the browser when a web program crashes", PY + "library/cgitb.html",
     PY + "library/superseded.html"),
    ("python ask the old unix network directory service for hosts and users", PY + "library/nis.html",
     PY + "library/superseded.html"),
    ("python turn bytes into mostly readable text with =XX escapes for mail", PY + "library/quopri.html",
     PY + "library/netdata.html"),
    ("python turn raw bytes into hexadecimal text and compute a crc32", PY + "library/binascii.html",
     PY + "library/netdata.html"),
    ("encode a mail subject line with accented letters so old servers accept it", PY + "library/email.header.html",
     PY + "library/netdata.html"),
    ("python find where site-packages and the include directories of this interpreter are",
     PY + "library/sysconfig.html", PY + "library/python.html"),
    ("turn on the new annotation behaviour early with a special import at the top of the file",
     PY + "library/__future__.html", PY + "library/python.html"),
    ("python list every class and function defined in a source file without importing it",
     PY + "library/pyclbr.html", PY + "library/language.html"),
    ("python which names are local, global or free inside a function, as the interpreter sees them", PY + "library/symtable.html",
     PY + "library/language.html"),
    ("python numeric ids for the grammar's terminal symbols like NAME and NEWLINE", PY + "library/token.html",
     PY + "library/language.html"),
    ("launch a package's main code by name the way the -m switch does, from my own code", PY + "library/runpy.html",
     PY + "library/modules.html"),
    ("read the installed version of a distribution from inside my program", PY + "library/importlib.metadata.html",
     PY + "library/modules.html"),
    ("which imports does my program pull in, listed without running it", PY + "library/modulefinder.html",
     PY + "library/modules.html"),
    ("python load login credentials for ftp hosts from the dotfile in my home folder", PY + "library/netrc.html",
     PY + "library/fileformats.html"),
    ("python read pyproject settings with the standard library", PY + "library/tomllib.html",
     PY + "library/fileformats.html"),
    ("python get a single keypress at the console on microsoft's os", PY + "library/msvcrt.html",
     PY + "library/windows.html"),
    ("python print a huge nested list cut short with dots", PY + "library/reprlib.html",
     PY + "tutorial/stdlib2.html"),
    ("python store a million ints compactly in one typed buffer", PY + "library/array.html",
     PY + "tutorial/stdlib2.html"),
    ("asyncio guard shared state between coroutines with a lock or a semaphore", PY + "library/asyncio-sync.html",
     PY + "library/asyncio-api-index.html"),
    ("asyncio run a shell command and read what it prints without blocking the loop",
     PY + "library/asyncio-subprocess.html", PY + "library/asyncio-api-index.html"),
    ("asyncio low-level awaitable object whose result is set later by a callback", PY + "library/asyncio-future.html",
     PY + "library/asyncio-llapi-index.html"),
    ("make asyncio use another event loop implementation for the whole process", PY + "library/asyncio-policy.html",
     PY + "library/asyncio-llapi-index.html"),
    ("postgres take away a role's rights on a table", PG + "sql-revoke.html", PG + "sql-commands.html"),
    ("postgres run an anonymous block of plpgsql once without saving a function", PG + "sql-do.html",
     PG + "sql-commands.html"),
    ("postgres tag a table for a selinux provider's mandatory access control",
     PG + "sql-security-label.html", PG + "sql-commands.html"),
    ("when sqlite moved its usual block length from 1024 to 4096 bytes", LITE + "pgszchng2016.html",
     LITE + "chronology.html"),
    ("postgres stop other sessions from writing a table until my transaction ends", PG + "sql-lock.html",
     PG + "sql-commands.html"),
]
HUB: list[tuple[str, str]] = [(q, url) for q, url, _ in HUB_QUERIES]

# The demo corpus's pages that list everything (issue 73), labelled by hand from what each page is — a
# table of contents or chapter index, an API index, a list of commands or modules, a changelog or
# release list, a tour over many modules — never from how it ranks: what eval/refind_hubs.py counts
# when it says how many misses have such a page first.
HUB_PAGES: frozenset[str] = frozenset({
    PY + "library/index.html", PY + "tutorial/index.html", PY + "library/superseded.html",
    PY + "library/netdata.html", PY + "library/python.html", PY + "library/language.html",
    PY + "library/modules.html", PY + "library/fileformats.html", PY + "library/functional.html",
    PY + "library/windows.html", PY + "library/asyncio-api-index.html", PY + "library/asyncio-llapi-index.html",
    PY + "library/audit_events.html", PY + "tutorial/stdlib.html", PY + "tutorial/stdlib2.html",
    PY + "library/asyncio.html", PY + "library/xml.html", PY + "library/email.html", PY + "library/http.html",
    PG + "sql-commands.html", LITE + "chronology.html", LITE + "35to36.html", LITE + "vtablist.html",
    LITE + "version3.html", LITE + "books.html",
})

KINDS = ("vague", "exact", "url", "site", "recent", "hub")

# Near-equals whose titles all carry the query's words (issue 54, item 6), written by hand on
# 2026-12-05 before any definition of "about as relevant" was tried on them: sibling pages — one
# command family, one module family, the same name on two sites — that a real history reads together,
# where the fused scores are further apart than a narrow band. None of these pages is meant by the
# queries above. (query, the pages it fits about equally: the one seen most recently is wanted)
SIBLINGS: list[tuple[str, tuple[str, ...]]] = [
    ("python email mime", (PY + "library/email.contentmanager.html", PY + "library/email.generator.html",
                           PY + "library/email.mime.html")),
    ("postgres alter", (PG + "sql-alterdomain.html", PG + "sql-alterextension.html", PG + "sql-altercollation.html")),
    ("postgres create", (PG + "sql-createcast.html", PG + "sql-createrule.html", PG + "sql-createschema.html")),
    ("postgres functions and operators", (PG + "functions-array.html", PG + "functions-math.html",
                                          PG + "functions-range.html")),
    ("postgres types", (PG + "datatype-boolean.html", PG + "datatype-character.html", PG + "datatype-money.html")),
    ("postgres drop", (PG + "sql-dropindex.html", PG + "sql-dropopclass.html")),
    ("postgres prepare", (PG + "sql-prepare.html", PG + "sql-prepare-transaction.html")),
    ("sqlite create", (LITE + "lang_createindex.html", LITE + "lang_createtrigger.html")),
    ("tkinter", (PY + "library/tkinter.dnd.html", PY + "library/tkinter.tix.html", PY + "library/dialog.html")),
    ("python xml", (PY + "library/xml.html", PY + "library/xml.sax.utils.html", PY + "library/xmlrpc.server.html")),
    ("python http", (PY + "library/http.html", PY + "library/http.cookies.html")),
    ("python unix", (PY + "library/crypt.html", PY + "library/dbm.html", PY + "library/fnmatch.html")),
    ("python posix", (PY + "library/posix.html", PY + "library/termios.html")),
    ("python pickle", (PY + "library/copyreg.html", PY + "library/pickletools.html")),
    ("compile python", (PY + "library/codeop.html", PY + "library/compileall.html")),
    ("determine the type of a file", (PY + "library/imghdr.html", PY + "library/sndhdr.html")),
    ("python parser", (PY + "library/getopt.html", PY + "library/html.parser.html")),
    ("floating point", (PY + "tutorial/floatingpoint.html", LITE + "floatingpoint.html")),
    ("python modules", (PY + "library/distutils.html", PY + "library/runpy.html", PY + "library/modules.html")),
    ("analyze", (PG + "sql-analyze.html", LITE + "lang_analyze.html")),
    ("windows python", (PY + "library/windows.html", PY + "library/winsound.html")),
    ("download sqlite", (LITE + "download.html", LITE + "getthecode.html")),
    ("python services", (PY + "library/language.html", PY + "library/python.html")),
    ("postgres functions", (PG + "functions-sequence.html", PG + "functions-trigger.html",
                            PG + "functions-window.html")),
]

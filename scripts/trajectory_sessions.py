"""The scripted shell sessions behind the bundled trajectory corpus (what ``scripts.record_trajectories`` replays).

Each session is a task, a starting workspace and the steps an agent took: its note (a question when the step
looks something up) and a shell command or a file write. They cover inspecting files, computing with shell
tools, a command that fails and is then fixed (missing folder, wrong flag, missing file, failing assertion),
and editing files. The outputs are not written here: the recorder runs the commands and records what they print.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Step:
    """One agent step: its note, and a shell command or a (path, content) file write."""

    thought: str
    command: str | None = None
    write: tuple[str, str] | None = None


@dataclass(frozen=True)
class Session:
    """One scripted session; ``style`` is the format it is recorded in: "chat", "text" (mini) or "atif"."""

    id: str
    style: str
    task: str
    workspace: dict[str, str]
    steps: list[Step] = field(default_factory=list)


_LOG = "".join(
    f"2026-03-0{d} 10:{m:02d}:00 {level} {msg}\n"
    for d, m, level, msg in [
        (1, 1, "INFO", "service started"), (1, 5, "ERROR", "disk quota exceeded"), (1, 9, "INFO", "request ok"),
        (2, 2, "WARN", "slow response"), (2, 7, "ERROR", "timeout talking to db"), (2, 8, "INFO", "request ok"),
        (3, 3, "ERROR", "timeout talking to db"), (3, 4, "INFO", "service stopped"),
    ]
)  # fmt: skip

_REPORT_PY = """import json

with open("settings.json") as f:
    settings = json.load(f)
rows = [line.split(",") for line in open("visits.csv").read().split()[1:]]
total = sum(int(r[1]) for r in rows)
with open("report.txt", "w") as out:
    out.write(f"{settings['title']}: {total} visits\\n")
print("wrote report.txt")
"""

_MATHUTIL = """def mean(values):
    return sum(values) / (len(values) + 1)


def spread(values):
    return max(values) - min(values)
"""

SESSIONS: list[Session] = [
    Session("log-errors", "chat",
            "Count the lines of server.log whose level is ERROR and write the count to errors.txt.",
            {"server.log": _LOG}, [
                Step("Let me look at the log format first.", "head -3 server.log"),
                Step("How many lines of server.log have the level ERROR?", "grep -c ' ERROR ' server.log"),
                Step("Now write the count.", "grep -c ' ERROR ' server.log > errors.txt"),
                Step("Check the result.", "cat errors.txt"),
            ]),
    Session("sales-total", "atif", "Compute the sum of the amount column of sales.csv and write it to total.txt.",
            {"sales.csv": "id,region,amount\n1,north,120\n2,south,75\n3,north,310\n4,east,42\n5,south,18\n"}, [
                Step("Look at the columns.", "head -2 sales.csv"),
                Step("How many data rows does sales.csv have?", "tail -n +2 sales.csv | wc -l"),
                Step("What is the sum of the amount column?", "awk -F, 'NR>1 {s+=$3} END {print s}' sales.csv"),
                Step("Write it.", "awk -F, 'NR>1 {s+=$3} END {print s}' sales.csv > total.txt"),
            ]),
    Session("backup-config", "text", "Copy config.ini to backup/config.ini.",
            {"config.ini": "[server]\nhost = 127.0.0.1\nport = 8000\n"}, [
                Step("Copy it.", "cp config.ini backup/config.ini"),
                Step("The backup folder does not exist; create it.", "mkdir -p backup"),
                Step("Copy again.", "cp config.ini backup/config.ini"),
                Step("Which files are in backup now?", "ls backup"),
            ]),
    Session("weekly-report", "chat",
            "Produce report.txt by running `python3 report.py`. The report's title must be Weekly visits.",
            {"report.py": _REPORT_PY, "visits.csv": "day,visits\nmon,120\ntue,98\nwed,143\n",
             "README.md": "report.py reads settings.json: {\"title\": \"...\"}\n"}, [
                Step("Run the report.", "python3 report.py"),
                Step("It needs settings.json; what does the README say?", "cat README.md"),
                Step("Create the settings.", write=("settings.json", '{"title": "Weekly visits"}\n')),
                Step("Run it again.", "python3 report.py"),
                Step("Check the report.", "cat report.txt"),
            ]),  # fmt: skip
    Session("top-scores", "atif",
            "Write the three highest scores of scores.txt (the whole lines, highest first) to top3.txt.",
            {"scores.txt": "ada 71\nbob 93\ncy 58\ndee 88\neve 64\nfay 97\n"}, [
                Step("Sort by the score column.", "sort -k2 --reverse-numeric scores.txt"),
                Step("That flag does not exist; use -n and -r.", "sort -k2 -nr scores.txt | head -3 > top3.txt"),
                Step("Who has the highest score?", "sort -k2 -nr scores.txt | head -1 | cut -d' ' -f1"),
                Step("Check.", "cat top3.txt"),
            ]),
    Session("count-lines-script", "text", "Make count.sh work: it must write the total number of lines of "
            "parts/*.txt to count.txt.",
            {"count.sh": "#!/bin/bash\nset -e\ncat parts/*.txt | wc -q > count.txt\necho \"lines: $(cat count.txt)\"\n",
             "parts/a.txt": "alpha\nbeta\ngamma\n", "parts/b.txt": "delta\nepsilon\n",
             "parts/c.txt": "zeta\neta\n"}, [
                Step("Run the script.", "bash count.sh"),
                Step("wc has no -q flag; let me read the script.", "cat count.sh"),
                Step("Use -l to count lines.", "sed -i 's/wc -q/wc -l/' count.sh"),
                Step("Run it again.", "bash count.sh"),
            ]),  # fmt: skip
    Session("app-config", "chat", "In app.conf set port to 9090 and debug to false; leave the other settings.",
            {"app.conf": "name=shop\nport=8080\ndebug=true\nworkers=4\n"}, [
                Step("Look at the file.", "cat app.conf"),
                Step("On which line of app.conf is the port set?", "grep -n '^port=' app.conf | cut -d: -f1"),
                Step("How many workers does app.conf configure?", "grep '^workers=' app.conf | cut -d= -f2"),
                Step("Edit both settings.", "sed -i 's/^port=.*/port=9090/; s/^debug=true/debug=false/' app.conf"),
                Step("Check.", "cat app.conf"),
            ]),
    Session("word-frequency", "atif", "Find the most frequent word of notes.txt and write it to top_word.txt.",
            {"notes.txt": "the cat sat on the mat\nthe dog sat on the log\na cat and a dog\n"}, [
                Step("How many words does notes.txt contain?", "wc -w < notes.txt"),
                Step("Count each word.", "tr -s ' ' '\\n' < notes.txt | sort | uniq -c | sort -k1,1nr -k2 | head -3"),
                Step("Write the top one.",
                     "tr -s ' ' '\\n' < notes.txt | sort | uniq -c | sort -k1,1nr -k2 | head -1 | awk '{print $2}' "
                     "> top_word.txt"),
            ]),  # fmt: skip
    Session("rename-raw", "text", "Rename every .txt file in raw/ to the same name ending in .csv.",
            {"raw/jan.txt": "a,1\n", "raw/feb.txt": "b,2\n", "raw/mar.txt": "c,3\n", "keep.txt": "untouched\n"}, [
                Step("How many files are in raw?", "ls raw | wc -l"),
                Step("Rename them.", "for f in raw/*.txt; do mv \"$f\" \"${f%.txt}.csv\"; done"),
                Step("Check.", "ls raw"),
            ]),
    Session("mean-bug", "chat", "Fix mathutil.py so that mean() returns the arithmetic mean.",
            {"mathutil.py": _MATHUTIL}, [
                Step("Check mean on a small list.",
                     "python3 -c 'import mathutil; assert mathutil.mean([1, 2, 3]) == 2; print(\"ok\")'"),
                Step("The assertion fails; read the code.", "cat mathutil.py"),
                Step("The divisor is off by one.", "sed -i 's|len(values) + 1|len(values)|' mathutil.py"),
                Step("Check again.",
                     "python3 -c 'import mathutil; assert mathutil.mean([1, 2, 3]) == 2; print(\"ok\")'"),
            ]),  # fmt: skip
    Session("user-email", "atif", "Write the email address of the user with id 3 in users.json to email.txt.",
            {"users.json": '[{"id": 1, "email": "ann@example.org"}, {"id": 3, "email": "carl@example.org"}, '
             '{"id": 7, "email": "dora@example.org"}]\n'}, [
                Step("What is the email of user 3?",
                     "python3 -c 'import json; print(next(u[\"email\"] for u in json.load(open(\"users.json\")) "
                     "if u[\"id\"] == 3))'"),
                Step("How many users are there?",
                     "python3 -c 'import json; print(len(json.load(open(\"users.json\"))))'"),
                Step("Write it.", "printf 'carl@example.org\\n' > email.txt"),
            ]),  # fmt: skip
    Session("archive-logs", "chat", "Move every .log file from the top folder into logs/archive/.",
            {"a.log": "one\n", "b.log": "two\n", "notes.md": "keep me\n"}, [
                Step("How many .log files are at the top?", "ls *.log | wc -l"),
                Step("Move them.", "mv *.log logs/archive/"),
                Step("The folder is missing; create it.", "mkdir -p logs/archive"),
                Step("Move them again.", "mv *.log logs/archive/"),
                Step("Check.", "ls logs/archive"),
            ]),
    Session("region-values", "text", "Write the distinct region names of data.csv, sorted, one per line, to "
            "out/regions.txt.",
            {"data.csv": "id,region\n1,north\n2,south\n3,north\n4,west\n"}, [
                Step("Extract them.", "tail -n +2 data.csv | cut -d, -f2 | sort -u > out/regions.txt"),
                Step("out/ is missing; create it.", "mkdir out"),
                Step("Extract again.", "tail -n +2 data.csv | cut -d, -f2 | sort -u > out/regions.txt"),
                Step("How many distinct regions are there?", "wc -l < out/regions.txt"),
            ]),  # fmt: skip
    Session("run-script", "atif", "Make ./run.sh start: running it must print its ready message.",
            {"run.sh": "#!/bin/sh\necho \"ready: $(wc -l < jobs.txt) jobs queued\"\n",
             "jobs.txt": "build\ntest\ndeploy\n"}, [
                Step("Start it.", "./run.sh"),
                Step("Permission denied: the script is not executable.", "chmod +x run.sh"),
                Step("Start it again.", "./run.sh"),
            ]),  # fmt: skip
    Session("shout-import", "chat", "Make `python3 main.py` run; it should print the greeting in capitals.",
            {"main.py": "from textutil import shout\n\nprint(shout('hello world'))\n",
             "vendor/textutil.py": "def shout(text):\n    return text.upper() + '!'\n"}, [
                Step("Run it.", "python3 main.py"),
                Step("Where is a textutil module?", "find . -name 'textutil.py'"),
                Step("Copy it next to main.py.", "cp vendor/textutil.py ."),
                Step("Run again.", "python3 main.py"),
            ]),  # fmt: skip
]  # fmt: skip

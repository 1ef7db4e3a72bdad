"""Writes the two small QA fixtures in the official files' formats (run from this folder:
``python make_fixtures.py``). Every text is invented for ctxbench's tests: fictional places,
people and things, no sentence taken from SQuAD or HotpotQA.

- ``squad-dev-v2.0-mini.json``: SQuAD v2.0's dev layout (``{"version", "data": [{"title",
  "paragraphs": [{"context", "qas": [{"question", "id", "answers": [{"text", "answer_start"}],
  "is_impossible"}]}]}]}``, unanswerable questions with ``plausible_answers``): 4 articles of 4
  paragraphs, 35 answerable questions and 4 unanswerable ones.
- ``hotpot-dev-distractor-mini.json``: HotpotQA's distractor dev layout (a list of ``{"_id",
  "answer", "question", "supporting_facts": [[title, sent_id]], "context": [[title,
  [sentence, ...]]], "type", "level"}``): 20 two-hop questions, each over its supporting
  paragraphs (2, or 1 holding both facts) and 2 distractors from a pool of 16.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent

# article title -> [(paragraph, [(question, [answers]) | (question, None, plausible)])]
SQUAD = {
    "Harrowgate_Lighthouse": [
        ("The Harrowgate Lighthouse stands on a basalt spur at the northern end of Merrow Bay. It was designed by the "
         "engineer Tobias Quell and first lit in 1843, when its lamp burned whale oil. The tower is fifty-two metres tall "
         "and is painted in red and white bands so that sailors can recognise it by day as well as by night.",
         [("Who designed the Harrowgate Lighthouse?", ["Tobias Quell", "the engineer Tobias Quell", "Tobias Quell"]),
          ("In what year was the Harrowgate Lighthouse first lit?", ["1843"]),
          ("How tall is the tower of the lighthouse?", ["fifty-two metres", "fifty-two metres tall"]),
          ("Who demolished the Harrowgate Lighthouse?", None, "Tobias Quell")]),
        ("For most of the nineteenth century the light was tended by the Ambry family, who lived in a cottage at the "
         "foot of the tower. Margit Ambry kept the logbook for thirty-one years and recorded every ship that passed the "
         "spur. Her entries describe the great storm of 1867, in which the schooner Pale Finch ran aground on the rocks "
         "below the light.",
         [("Which family tended the light in the nineteenth century?", ["the Ambry family", "Ambry"]),
          ("For how many years did Margit Ambry keep the logbook?", ["thirty-one years", "thirty-one"]),
          ("Which schooner ran aground during the storm of 1867?", ["Pale Finch", "the schooner Pale Finch"])]),
        ("In 1921 the oil lamp was replaced by an electric lantern powered by a small generator in the keeper's "
         "cottage. The new lantern could be seen from forty kilometres out to sea. The change also meant that only one "
         "keeper was needed, and the last of the Ambry family left the spur the following spring.",
         [("What replaced the oil lamp in 1921?", ["an electric lantern", "electric lantern"]),
          ("From how far out to sea could the new lantern be seen?", ["forty kilometres"])]),
        ("Today the lighthouse is automated and the keeper's cottage houses a small museum run by the Merrow Bay "
         "Historical Society. Visitors can climb the two hundred and nine steps to the gallery between April and "
         "October. The museum's most prized object is the original brass lens, which was restored in 1998.",
         [("Who runs the museum in the keeper's cottage?", ["the Merrow Bay Historical Society", "Merrow Bay Historical Society"]),
          ("How many steps lead up to the gallery?", ["two hundred and nine"]),
          ("When was the original brass lens restored?", ["1998", "in 1998"]),
          ("How much does a ticket to the museum cost?", None, "two hundred and nine")]),
    ],
    "Velmora_cheese": [
        ("Velmora is a hard cheese made in the upland villages of the Castren valley. It is pressed into wheels of "
         "about nine kilograms and aged in limestone caves for at least fourteen months. The rind is rubbed with crushed "
         "juniper berries, which gives the cheese its faintly resinous smell.",
         [("Where is Velmora made?", ["the upland villages of the Castren valley", "Castren valley"]),
          ("For at least how long is Velmora aged?", ["fourteen months", "at least fourteen months"]),
          ("What is the rind of Velmora rubbed with?", ["crushed juniper berries", "juniper berries"])]),
        ("The milk for Velmora comes from a local breed of goat known as the Castren grey. Herders move the goats to "
         "high pastures in early summer and bring them down again before the first snow. Cheese made from summer milk "
         "is sold under a separate label, Velmora Alta, and fetches a higher price.",
         [("Which breed of goat gives the milk for Velmora?", ["the Castren grey", "Castren grey"]),
          ("Under what label is cheese from summer milk sold?", ["Velmora Alta"])]),
        ("A cooperative founded in 1952 buys milk from the herders and runs the three largest caves. Its members vote "
         "each year on the minimum price paid for milk, and the cooperative keeps a register of every wheel it ages. "
         "Smaller producers still age their cheese in private cellars beneath their houses.",
         [("In what year was the cooperative founded?", ["1952"]),
          ("How many caves does the cooperative run?", ["the three largest caves", "three"]),
          ("Who founded the cooperative in 1952?", None, "herders")]),
        ("Velmora received a protected designation of origin in 2006. Under its rules the cheese must be made from raw "
         "milk, and wheels that crack during ageing may not carry the Velmora name. Inspectors from the regional "
         "agriculture office visit the caves twice a year to tap and weigh sample wheels.",
         [("When did Velmora receive a protected designation of origin?", ["2006", "in 2006"]),
          ("How often do inspectors visit the caves?", ["twice a year"])]),
    ],
    "Orrin_Canal": [
        ("The Orrin Canal links the river Tamsel with the port of Welby over a distance of sixty-eight kilometres. "
         "Construction began in 1791 under the direction of the surveyor Helena Marsk and took eleven years to complete. "
         "The canal was built to carry coal from the Tamsel mines to ships waiting at Welby.",
         [("Which river does the Orrin Canal link with the port of Welby?", ["the river Tamsel", "Tamsel"]),
          ("Who directed the construction of the Orrin Canal?", ["Helena Marsk", "the surveyor Helena Marsk"]),
          ("How long did the canal take to complete?", ["eleven years"])]),
        ("Along its route the canal climbs through twenty-three locks, the steepest group of which is the Ladder at "
         "Brindon, where seven locks follow one another in less than a kilometre. A pumping house at the top of the "
         "Ladder lifted water from a reservoir to keep the upper reaches full.",
         [("How many locks does the canal climb through?", ["twenty-three"]),
          ("Where is the group of locks called the Ladder?", ["Brindon", "at Brindon"])]),
        ("Traffic on the canal declined after the Welby railway opened in 1854, and by the end of the century most "
         "barges carried only timber and grain. The last commercial cargo, a load of roofing slate, passed through the "
         "locks in 1931.",
         [("What opened in 1854?", ["the Welby railway", "Welby railway"]),
          ("What was the last commercial cargo on the canal?", ["a load of roofing slate", "roofing slate"])]),
        ("Volunteers began restoring the canal in 1974. They cleared silt from the channel, rebuilt the lock gates by "
         "hand and reopened the full length to pleasure boats in 1989. A festival is held at Brindon each August to "
         "mark the reopening.",
         [("When did volunteers begin restoring the canal?", ["1974"]),
          ("In what year was the full length of the canal reopened?", ["1989"]),
          ("Who paid for the restoration of the canal?", None, "Volunteers")]),
    ],
    "Quillon_Observatory": [
        ("The Quillon Observatory sits on the summit of Mount Aster at an altitude of 2,410 metres. It was founded in "
         "1908 by the astronomer Ilse Varrow, who chose the site because the air above the mountain is unusually dry "
         "and still.",
         [("Who founded the Quillon Observatory?", ["Ilse Varrow", "the astronomer Ilse Varrow"]),
          ("At what altitude is the Quillon Observatory?", ["2,410 metres"])]),
        ("Its main instrument is a reflecting telescope with a mirror 1.6 metres across, cast in a single piece of "
         "glass in 1936. Astronomers at Quillon used it to catalogue more than four thousand variable stars during the "
         "following four decades.",
         [("How wide is the mirror of the main telescope?", ["1.6 metres", "1.6 metres across"]),
          ("How many variable stars were catalogued at Quillon?", ["more than four thousand", "four thousand"])]),
        ("A cable car built in 1962 carries staff from the village of Lusk to the summit in nineteen minutes. Before "
         "it opened, supplies were taken up the mountain by mule along a path that took most of a day to climb.",
         [("How long does the cable car take to reach the summit?", ["nineteen minutes"])]),
        ("Light from the growing town of Lusk began to interfere with observations in the 1980s. The observatory now "
         "concentrates on teaching, and every summer it hosts a school where students spend a week operating the old "
         "telescope.",
         [("What began to interfere with observations in the 1980s?", ["Light from the growing town of Lusk", "Light"])]),
    ],
}

# title -> sentences (HotpotQA keeps a leading space on every sentence after the first)
POOL = {
    "Harlan Voss": ["Harlan Voss (1881\u20131950) was a Danish-born painter of harbour scenes.",
                    " He spent most of his working life in the port town of Edderby."],
    "Edderby": ["Edderby is a fishing town on the west coast of the island of Rask.", " Its population was 4,200 at the last census."],
    "Rask (island)": ["Rask is an island in the Saren Sea with an area of 310 square kilometres.", " Its capital is Holmvik."],
    "Holmvik": ["Holmvik is the largest town on Rask and the seat of its island council.",
                " A ferry connects it with the mainland port of Dunmere twice a day."],
    "Mira Castell": ["Mira Castell is a novelist whose first book, The Salt Orchard, appeared in 1994.", " She was born in Dunmere."],
    "The Salt Orchard": ["The Salt Orchard is a novel by Mira Castell set in a village of apple growers.",
                         " It won the Brannock Prize in 1995."],
    "Brannock Prize": ["The Brannock Prize is a literary award founded in 1961 by the publisher Edwin Brannock.",
                       " It is presented each November in the city of Calloway."],
    "Dunmere": ["Dunmere is a port city on the mainland coast opposite Rask.", " It is known for its rope works, which closed in 1978."],
    "Calloway": ["Calloway is an inland city on the river Fenn.", " Its university was founded in 1702."],
    "River Fenn": ["The Fenn is a river that rises in the Tollan Hills and flows for 140 kilometres to the sea.",
                   " Calloway is the largest city on its banks."],
    "Tollan Hills": ["The Tollan Hills are a range of low chalk hills.", " Their highest point, Gaunt Beacon, reaches 297 metres."],
    "Otto Penrick": ["Otto Penrick (1902\u20131977) was an engineer who designed the Fenn Viaduct.",
                     " He later taught at the University of Calloway."],
    "Fenn Viaduct": ["The Fenn Viaduct is a railway bridge of twenty-one arches over the river Fenn.", " It was completed in 1931."],
    "Lena Strand": ["Lena Strand is a violinist and composer from Holmvik.", " Her suite Tidewater was first performed in 2003."],
    "Tidewater (suite)": ["Tidewater is a suite for violin and strings by Lena Strand.",
                          " Its premiere took place at the Calloway Concert Hall."],
    "Calloway Concert Hall": ["The Calloway Concert Hall opened in 1958 and seats 1,900 people.",
                              " It was designed by the architect Ruth Almer."],
}

# (question, answer, type, [(gold title, supporting sentence index)])
HOTPOT = [
    ("On which island is the town where Harlan Voss spent most of his working life?", "Rask", "bridge",
     [("Harlan Voss", 1), ("Edderby", 0)]),
    ("What was the population of the town where Harlan Voss worked at the last census?", "4,200", "bridge",
     [("Harlan Voss", 1), ("Edderby", 1)]),
    ("What is the capital of the island on whose west coast Edderby lies?", "Holmvik", "bridge", [("Edderby", 0), ("Rask (island)", 1)]),
    ("Which mainland port has a ferry to the capital of Rask?", "Dunmere", "bridge", [("Rask (island)", 1), ("Holmvik", 1)]),
    ("Which prize did the first novel of Mira Castell win?", "the Brannock Prize", "bridge",
     [("Mira Castell", 0), ("The Salt Orchard", 1)]),
    ("In which city is the prize won by The Salt Orchard presented?", "Calloway", "bridge",
     [("The Salt Orchard", 1), ("Brannock Prize", 1)]),
    ("What closed in 1978 in the birthplace of Mira Castell?", "its rope works", "bridge", [("Mira Castell", 1), ("Dunmere", 1)]),
    ("On which river is the city where the Brannock Prize is presented?", "the river Fenn", "bridge",
     [("Brannock Prize", 1), ("Calloway", 0)]),
    ("In which hills does the river that flows through Calloway rise?", "the Tollan Hills", "bridge",
     [("Calloway", 0), ("River Fenn", 0)]),
    ("What is the highest point of the hills where the Fenn rises?", "Gaunt Beacon", "bridge", [("River Fenn", 0), ("Tollan Hills", 1)]),
    ("When was the university founded in the city where Otto Penrick taught?", "1702", "bridge",
     [("Otto Penrick", 1), ("Calloway", 1)]),
    ("How many arches has the bridge designed by Otto Penrick?", "twenty-one", "bridge", [("Otto Penrick", 0), ("Fenn Viaduct", 0)]),
    ("Who was born earlier, Harlan Voss or Otto Penrick?", "Harlan Voss", "comparison", [("Harlan Voss", 0), ("Otto Penrick", 0)]),
    ("Are Rask and Calloway both cities?", "no", "comparison", [("Rask (island)", 0), ("Calloway", 0)]),
    ("In which hall was the suite of the violinist from Holmvik first performed?", "the Calloway Concert Hall", "bridge",
     [("Lena Strand", 1), ("Tidewater (suite)", 1)]),
    ("Who designed the hall where Tidewater was first performed?", "Ruth Almer", "bridge",
     [("Tidewater (suite)", 1), ("Calloway Concert Hall", 1)]),
    ("How many people does the concert hall designed by Ruth Almer seat?", "1,900", "bridge",
     [("Calloway Concert Hall", 0), ("Calloway Concert Hall", 1)]),
    ("Which was completed first, the Fenn Viaduct or the Calloway Concert Hall?", "the Fenn Viaduct", "comparison",
     [("Fenn Viaduct", 1), ("Calloway Concert Hall", 0)]),
    ("Who founded the award that The Salt Orchard won?", "Edwin Brannock", "bridge", [("The Salt Orchard", 1), ("Brannock Prize", 0)]),
    ("Is Lena Strand from the largest town on Rask?", "yes", "comparison", [("Lena Strand", 0), ("Holmvik", 0)]),
]


def squad() -> dict:
    data, n = [], 0
    for title, paragraphs in SQUAD.items():
        out = []
        for context, questions in paragraphs:
            qas = []
            for q in questions:
                n += 1
                qid = f"ctx{n:04d}"
                if q[1] is None:
                    plausible = q[2]
                    qas.append({"plausible_answers": [{"text": plausible, "answer_start": context.index(plausible)}],
                                "question": q[0], "id": qid, "answers": [], "is_impossible": True})
                else:
                    answers = [{"text": a, "answer_start": context.index(a)} for a in q[1]]
                    qas.append({"question": q[0], "id": qid, "answers": answers, "is_impossible": False})
            out.append({"qas": qas, "context": context})
        data.append({"title": title, "paragraphs": out})
    return {"version": "v2.0", "data": data}


def hotpot() -> list:
    titles = list(POOL)
    items = []
    for i, (question, answer, kind, facts) in enumerate(HOTPOT):
        gold = list(dict.fromkeys(t for t, _ in facts))
        others = [t for t in titles[(3 * i + 5) % len(titles):] + titles if t not in gold]
        distractors = list(dict.fromkeys(others))[:2]
        order = [distractors[0], gold[0], distractors[1], *gold[1:]] if i % 2 else [*gold, *distractors]
        items.append({"_id": f"ctxhp{i:04d}", "answer": answer, "question": question,
                      "supporting_facts": [[t, s] for t, s in facts],
                      "context": [[t, POOL[t]] for t in order], "type": kind, "level": "medium"})
    return items


if __name__ == "__main__":
    (HERE / "squad-dev-v2.0-mini.json").write_text(json.dumps(squad()))
    (HERE / "hotpot-dev-distractor-mini.json").write_text(json.dumps(hotpot()))

# One batch item: read a meeting transcript from `docs`, find the customer it is mostly about,
# and write one note about it to `crm`. INPUT is the item: {"doc_id": ..., "title": ...}.
#
#   codemode init --demo --config demo/codemode.toml && cd demo   # the bundled docs and crm servers
#   codemode sync && codemode pin --approve
#   printf '\n[policy.consent]\nnever = ["crm/add_note"]\n' >> codemode.toml   # writes a batch may make
#   codemode batch ../examples/batch/extract_to_crm.py --inputs ../examples/batch/transcripts.jsonl \
#       --key doc_id --verify ../examples/batch/verify_note.py --out results.jsonl
#
# A batch cannot stop at every write to ask a person: allow its writes in the policy (as above),
# or pre-issue approvals with `codemode approve`.
import re
from collections import Counter

from servers.crm import add_note
from servers.docs import get_document

text = get_document(doc_id=INPUT["doc_id"])["text"]
mentions = Counter(re.findall(r"CUST-\d{4}", text))
if not mentions:
    result = {"doc_id": INPUT["doc_id"], "customer": None, "note": None}
else:
    customer, count = mentions.most_common(1)[0]
    note = f"[{INPUT['doc_id']}] discussed in '{INPUT['title']}' ({count} mentions)"
    receipt = add_note(customer_id=customer, text=note)["receipt_id"]
    result = {"doc_id": INPUT["doc_id"], "customer": customer, "note": note, "receipt": receipt}
result

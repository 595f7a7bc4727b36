"""What the transformers fixture scripts share: fp32 logits of a sequence and a greedy
continuation with its smallest top-2 margin (how far the reference was from a tie)."""
import numpy as np
import torch


@torch.no_grad()
def logits_of(model, ids):
    out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float().numpy()


@torch.no_grad()
def greedy(model, prompt, n):
    ids, margins = list(prompt), []
    for _ in range(n):
        last = logits_of(model, ids)[-1]
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        ids.append(int(np.argmax(last)))
    return ids[len(prompt):], min(margins)

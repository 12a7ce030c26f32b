"""A word-level LSTM language model in the style of PyTorch's word_language_model example:
Embedding -> 2-layer LSTM -> Linear decoder with tied-size init, batchify, hidden state
carried between batches and detached (repackage_hidden), gradient clipping and the
example's manual SGD update `p.data.add_(p.grad, alpha=-lr)`."""

import math

import numpy as np
import torch
import torch.nn as nn

from shared_init import share_initial_weights


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.init_weights()
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt=6):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def main():
    torch.manual_seed(1111)
    rng = np.random.default_rng(3)
    ntokens = 20
    corpus = torch.tensor(rng.integers(0, ntokens, size=400), dtype=torch.long)
    train_data = batchify(corpus[:300], 5)
    val_data = batchify(corpus[300:], 4)
    model = RNNModel(ntokens, 16, 24, 2)
    share_initial_weights(model)
    criterion = nn.NLLLoss()
    lr, clip, bptt = 5.0, 0.25, 6

    def evaluate(data_source):
        model.eval()
        total_loss = 0.
        hidden = model.init_hidden(4)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, bptt):
                data, targets = get_batch(data_source, i, bptt)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    for epoch in range(1, 3):
        model.train()
        hidden = model.init_hidden(5)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            data, targets = get_batch(train_data, i, bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            if batch % 3 == 0:
                print('| epoch {:3d} | batch {:3d} | lr {:02.2f} | loss {:5.6f} | ppl {:8.4f}'.format(
                    epoch, batch, lr, loss.item(), math.exp(loss.item())))
        val_loss = evaluate(val_data)
        print('| end of epoch {:3d} | valid loss {:5.6f} | valid ppl {:8.4f}'.format(
            epoch, val_loss, math.exp(val_loss)))
        lr /= 2.0


if __name__ == '__main__':
    main()

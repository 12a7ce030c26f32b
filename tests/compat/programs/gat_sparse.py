"""A graph attention network in the style of pytorch/examples' gat, with the attention kept
sparse: a random citation-like graph, features scaled by a sparse diagonal matrix
(`torch.diag(...).to_sparse() @ features`), the adjacency as an int64 sparse tensor plus
self-loops, per-head edge scores -> torch.sparse.softmax over each node's neighbours ->
torch.sparse.mm with the node features, nn.DataParallel when more than one device is
seen, NLL loss and Adam. No dropout: the two runs' random streams differ."""

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from shared_init import share_initial_weights

rng = np.random.default_rng(11)


class SparseGraphAttention(nn.Module):
    def __init__(self, in_features, out_features, n_heads, concat):
        super().__init__()
        self.n_heads, self.out_features, self.concat = n_heads, out_features, concat
        self.W = nn.Parameter(torch.empty(in_features, out_features * n_heads))
        self.a_src = nn.Parameter(torch.empty(n_heads, out_features))
        self.a_dst = nn.Parameter(torch.empty(n_heads, out_features))
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a_src)
        nn.init.xavier_normal_(self.a_dst)

    def forward(self, h, edge_index):
        n = h.shape[0]
        projected = torch.mm(h, self.W).view(n, self.n_heads, self.out_features)
        src, dst = edge_index[0], edge_index[1]
        heads = []
        for k in range(self.n_heads):
            hk = projected[:, k, :]
            scores = (hk * self.a_src[k]).sum(dim=-1)[src] + (hk * self.a_dst[k]).sum(dim=-1)[dst]
            scores = F.leaky_relu(scores, 0.2)
            attention = torch.sparse_coo_tensor(edge_index, scores, (n, n))
            attention = torch.sparse.softmax(attention, dim=1)
            heads.append(torch.sparse.mm(attention, hk))
        return torch.cat(heads, dim=1) if self.concat else torch.stack(heads).mean(dim=0)


class GAT(nn.Module):
    def __init__(self, in_features, hidden, n_heads, classes):
        super().__init__()
        self.gat1 = SparseGraphAttention(in_features, hidden, n_heads, concat=True)
        self.gat2 = SparseGraphAttention(hidden * n_heads, classes, 1, concat=False)

    def forward(self, x, edge_index):
        x = F.elu(self.gat1(x, edge_index))
        return F.log_softmax(self.gat2(x, edge_index), dim=1)


def make_graph(nodes=48, features=20, classes=3):
    labels = rng.integers(0, classes, nodes)
    content = (rng.random((nodes, features)) < 0.2).astype(np.float32)
    content[:, :classes] += np.eye(classes, dtype=np.float32)[labels]  # a signal to learn
    content[5] = 0.0  # a node without features: its scale is inf, set to 0 as the example does
    same = labels[:, None] == labels[None, :]
    link = rng.random((nodes, nodes)) < np.where(same, 0.15, 0.02)
    edges = np.argwhere(link & ~np.eye(nodes, dtype=bool))
    return content, labels, edges


def main():
    content, labels_np, edges = make_graph()
    nodes = content.shape[0]
    features = torch.tensor(content)
    scale = 1 / torch.sum(features, dim=1)
    scale[scale == float("inf")] = 0
    features = torch.diag(scale).to_sparse() @ features

    adjacency = torch.sparse_coo_tensor(edges.T, torch.ones(len(edges)), (nodes, nodes), dtype=torch.int64)
    adjacency = torch.eye(nodes) + adjacency
    print(f"nodes {nodes} edges {len(edges)} with self-loops {int((adjacency > 0).sum().item())}")
    sparse_adjacency = adjacency.to_sparse()
    edge_index = sparse_adjacency.indices()
    print(f"sparse adjacency nnz {sparse_adjacency._nnz()} coalesced {sparse_adjacency.is_coalesced()}")

    labels = torch.tensor(labels_np)
    train = torch.tensor(np.arange(0, nodes, 2))
    test = torch.tensor(np.arange(1, nodes, 2))

    model = GAT(features.shape[1], 6, 2, 3)
    share_initial_weights(model)
    if torch.cuda.device_count() > 1:  # the scripts' usual "several GPUs" branch
        model = nn.DataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)
    for epoch in range(1, 21):
        model.train()
        optimizer.zero_grad()
        output = model(features, edge_index)
        loss = F.nll_loss(output[train], labels[train])
        loss.backward()
        optimizer.step()
        if epoch % 5 == 0:
            model.eval()
            with torch.no_grad():
                output = model(features, edge_index)
                test_loss = F.nll_loss(output[test], labels[test])
                accuracy = (output[test].argmax(dim=1) == labels[test]).float().mean()
            print(f"epoch {epoch:02d} loss {loss.item():.5f} test loss {test_loss.item():.5f} "
                  f"accuracy {accuracy.item():.4f}")


if __name__ == "__main__":
    main()

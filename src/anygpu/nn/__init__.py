"""ag.nn: torch.nn's modules, functional API and initialisers on anygpu tensors."""

from . import functional
from . import init
from . import parallel
from .parallel import DataParallel  # torch.nn.DataParallel (nn.parallel.DistributedDataParallel stays there)
from .modules import (
    AvgPool2d, BatchNorm2d, Conv2d, ConvTranspose2d, CrossEntropyLoss, Dropout, Embedding, Flatten, GELU,
    GroupNorm, Identity, IncompatibleKeys, LayerNorm, Linear, MaxPool2d, Module, ModuleList, MSELoss,
    MultiheadAttention, Parameter, ReLU, Sequential, Sigmoid, SiLU, Softmax, StateDictError, Tanh, Upsample,
)
from . import utils
from .modules import AdaptiveAvgPool2d
from .activation import (
    CELU, ELU, GLU, SELU, CosineSimilarity, Dropout1d, Dropout2d, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU,
    LogSigmoid, LogSoftmax, Mish, PairwiseDistance, PReLU, ReLU6, Softmin, Softplus, Softsign, Tanhshrink, Threshold,
    Unflatten,
)
from .containers import ModuleDict, ParameterDict, ParameterList
from .layers1d import AvgPool1d, BatchNorm1d, Conv1d, ConvTranspose1d, MaxPool1d
from .image_layers import (
    Fold, Unfold, EmbeddingBag, Bilinear, AdaptiveAvgPool1d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, CircularPad1d, CircularPad2d, ConstantPad1d, ConstantPad2d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d,
    PixelShuffle, PixelUnshuffle, ReflectionPad1d, ReflectionPad2d, ReplicationPad1d, ReplicationPad2d, ZeroPad1d,
    ZeroPad2d,
)
from .loss import (
    BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, GaussianNLLLoss, HingeEmbeddingLoss, HuberLoss, KLDivLoss, L1Loss,
    MarginRankingLoss, MultiLabelSoftMarginLoss, NLLLoss, PoissonNLLLoss, SmoothL1Loss, SoftMarginLoss,
    TripletMarginLoss,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import (
    Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
)

__all__ = [
    "functional", "init", "Module", "Parameter", "IncompatibleKeys", "StateDictError", "Identity", "Linear",
    "Conv2d", "ConvTranspose2d", "GroupNorm", "LayerNorm", "BatchNorm2d", "Embedding", "Sequential",
    "ModuleList", "ReLU", "SiLU", "GELU", "Sigmoid", "Tanh", "Softmax", "Flatten", "Dropout", "MaxPool2d",
    "AvgPool2d", "Upsample", "MultiheadAttention", "MSELoss", "CrossEntropyLoss",
    "utils", "ModuleDict", "ParameterList", "ParameterDict", "LeakyReLU", "ELU", "Softplus", "Hardtanh", "ReLU6",
    "LogSigmoid", "Mish", "LogSoftmax", "Unflatten", "Dropout1d", "Dropout2d", "NLLLoss", "BCELoss",
    "BCEWithLogitsLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "KLDivLoss", "RNNBase", "RNN", "LSTM", "GRU",
    "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "Transformer", "TransformerEncoder", "TransformerDecoder",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "AdaptiveAvgPool2d",
    "Conv1d", "BatchNorm1d", "MaxPool1d", "AvgPool1d", "ConvTranspose1d", "Bilinear", "EmbeddingBag", "Fold", "Unfold", "AdaptiveAvgPool1d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "PixelShuffle", "PixelUnshuffle", "ZeroPad1d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d",
    "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d", "CircularPad1d", "CircularPad2d", "SELU", "CELU", "GLU", "Hardsigmoid", "Hardswish", "Softsign",
    "Tanhshrink", "Softmin", "Threshold", "PReLU", "CosineSimilarity", "PairwiseDistance", "MarginRankingLoss",
    "SoftMarginLoss", "HingeEmbeddingLoss", "CosineEmbeddingLoss", "TripletMarginLoss", "PoissonNLLLoss",
    "GaussianNLLLoss", "MultiLabelSoftMarginLoss",
]
from .extra_modules import *  # noqa: E402,F401,F403  (RMSNorm, Softshrink, LazyLinear, ...: extra_modules.__all__)
from .extra_modules import __all__ as _extra_names  # noqa: E402
__all__ += _extra_names


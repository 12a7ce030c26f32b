"""ag.nn: torch.nn's modules, functional API and initialisers on anygpu tensors."""

from . import functional
from . import init
from .modules import (
    AvgPool2d, BatchNorm2d, Conv2d, ConvTranspose2d, CrossEntropyLoss, Dropout, Embedding, Flatten, GELU,
    GroupNorm, Identity, IncompatibleKeys, LayerNorm, Linear, MaxPool2d, Module, ModuleList, MSELoss,
    MultiheadAttention, Parameter, ReLU, Sequential, Sigmoid, SiLU, Softmax, StateDictError, Tanh, Upsample,
)

__all__ = [
    "functional", "init", "Module", "Parameter", "IncompatibleKeys", "StateDictError", "Identity", "Linear",
    "Conv2d", "ConvTranspose2d", "GroupNorm", "LayerNorm", "BatchNorm2d", "Embedding", "Sequential",
    "ModuleList", "ReLU", "SiLU", "GELU", "Sigmoid", "Tanh", "Softmax", "Flatten", "Dropout", "MaxPool2d",
    "AvgPool2d", "Upsample", "MultiheadAttention", "MSELoss", "CrossEntropyLoss",
]

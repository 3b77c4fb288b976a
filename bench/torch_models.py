"""The reference models (models/reference.h) in PyTorch, for the comparison scripts: the same
layers, in PyTorch's numbering."""


def torch_model(name, nn):
    """`nn` is torch.nn (passed in, so that importing this module does not import torch)."""
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512),
                             nn.ReLU(), nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(1568, 128), nn.ReLU(), nn.Linear(128, 10))

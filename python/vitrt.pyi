# Type stubs for the vitrt extension module (maturin puts them into the wheel).
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np
import numpy.typing as npt

__version__: str

class Prediction(TypedDict):
    index: int
    label: str
    probability: float

# A path, a file's contents, a PIL image, or uint8 pixels [H, W, 3] or [H, W].
Image = Union[str, os.PathLike, bytes, npt.NDArray[np.uint8], Any]
# A sequence of images, a uint8 array [N, H, W, C], or a 1-D numpy array of objects.
Images = Union[Sequence[Image], npt.NDArray[Any]]

class Model:
    def __init__(
        self,
        model: Union[str, os.PathLike],
        # "cpu", "cuda", "cuda:N", several: "cuda:all", "cuda:0,2", or a list of names.
        device: Optional[Union[str, Sequence[str]]] = None,
        dtype: Optional[str] = None,
        offline: bool = False,
        revision: Optional[str] = None,
        batch_size: Optional[int] = None,
        workers: Optional[int] = None,
        cuda_graphs: bool = True,
        residual_dtype: Optional[str] = None,
        decode: Optional[str] = None,
    ) -> None: ...
    @property
    def device(self) -> str: ...
    @property
    def devices(self) -> List[str]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def image_size(self) -> Tuple[int, int]: ...
    def classify(self, images: Images, top_k: int = 5) -> List[List[Prediction]]: ...
    def embed(
        self, images: Images, pool: Optional[str] = None, normalize: bool = False
    ) -> npt.NDArray[np.float32]: ...
    def zero_shot(
        self,
        images: Images,
        labels: Sequence[str],
        templates: Optional[Sequence[str]] = None,
        top_k: int = 5,
    ) -> List[List[Prediction]]: ...
    # pixel_values: float32 [B, C, H, W] as a numpy array, any host tensor speaking DLPack, or a
    # contiguous CUDA tensor (torch's, say) on the model's GPU, read there through DLPack.
    def forward(self, pixel_values: Any) -> Dict[str, npt.NDArray[np.float32]]: ...

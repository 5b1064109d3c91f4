"""pi_mobilenet: a small MobileNet, depthwise separable convolutions, for photos on Pis.

Training images are first shifted at random (:data:`TRANSLATION`; in
training only). Then the network of Howard et al., "MobileNets: Efficient
Convolutional Neural Networks for Mobile Vision Applications",
arXiv:1704.04861, 2017: a 3x3 convolution with stride 2, then depthwise
separable blocks (a 3x3 depthwise convolution, batch
normalisation and ReLU6, then a 1x1 convolution, batch normalisation and
ReLU6), stride 2 to downsample, global average pooling, dropout and a dense
layer of logits. It keeps the first seven blocks of the paper's Table 1 (to
512 filters), at the width multiplier :data:`ALPHA`, so that it trains on a
Pi's CPU; its weights start random (no pretrained weights).

For 64x64x3 images and 4 classes: 143,716 weights (140,452 trained, the rest
the batch normalisations' moving means and variances) and 6,220,800
multiply-adds per image forward (6,219,776 in the convolutions, plus 256 a
class in the dense layer), counted layer by layer. It takes images of any size
from :data:`MIN_SIZE` up and any channel count (grey images ``(height,
width)`` get a channel axis).
"""

from __future__ import annotations

from typing import Any

from training.models._common import DEFAULT_NUM_CLASSES, compile_model, image_input

#: Width multiplier (the paper's alpha): every layer's filters times this.
ALPHA = 0.5
#: Filters of the first convolution (stride 2), before :data:`ALPHA`.
STEM_FILTERS = 32
#: (filters of the 1x1 convolution before :data:`ALPHA`, stride of the
#: depthwise one) of each block: the first seven rows of the paper's Table 1.
BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1))
#: Dropout before the logits, as in Keras' transfer-learning guide's head on a MobileNet.
DROPOUT = 0.2
#: Largest shift of a training image, as a fraction of its height and of its
#: width: Keras' ``RandomTranslation`` (edges filled by reflection), which
#: moves each image in training only and passes it unchanged in evaluation,
#: prediction and the exported model. A few thousand photos are too few for
#: random weights to learn a subject wherever it sits in the frame. On
#: ``make bench``'s 4,000 camera-like photos (3,200 to train, 20 epochs, one
#: process, seed 42) the test accuracy is 0.22 without the shift (0.94 on the
#: training photos) and 0.85 with it, for 18 % fewer examples a second (1,268
#: against 1,543); a shift of 0.15 gives 0.81. Flips are left out: a mirrored
#: digit or letter is another class.
TRANSLATION = 0.1
#: Smallest height and width: the strides take images down 16 times, and below
#: 32 pixels the last blocks would see a 1x1 map, their 3x3 filters mostly padding.
MIN_SIZE = 32
#: The shape a build called without a dataset's gets: small RGB photos.
DEFAULT_INPUT_SHAPE = (64, 64, 3)
#: Momentum of the batch normalisation's moving statistics. Keras' default,
#: 0.99, keeps 0.99^n of the initial mean 0 and variance 1 after n steps: the
#: few hundred steps of a small photo folder leave the statistics that
#: inference uses far from the data's. 0.9 follows the data within tens of
#: steps (the momentum of the original Inception batch normalisation, Ioffe
#: and Szegedy, ICML 2015, is 0.9 as well).
BN_MOMENTUM = 0.9

# Plain BatchNormalization, not SyncBatchNormalization. Under
# multi_worker_mirrored each replica normalises with its own batch's statistics
# (batch_size examples, 64 by default): statistics per worker, as Goyal et al.
# ("Accurate, Large Minibatch SGD", arXiv:1706.02677) compute them on 32
# images per worker. tf_keras keeps the moving means and variances per replica
# and averages them when they are read (ON_READ variables, aggregation MEAN),
# so the saved model holds the mean over the workers. A synchronised batch
# normalisation would all-reduce the statistics of each of its 15 layers in
# every step, forward and backward: collectives that each pay the network's
# latency between Pis.


def build(
    learning_rate: float,
    steps_per_execution: int = 1,
    *,
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> Any:
    """A compiled MobileNet: float32 (batch, *input_shape) in [0, 1] -> logits (batch, num_classes).

    Raises:
        ModelError: ``input_shape`` is no image (rank 2 or 3) of at least
            :data:`MIN_SIZE` pixels a side.
    """
    import tf_keras as keras

    layers, _ = image_input("pi_mobilenet", input_shape, MIN_SIZE)
    layers.append(keras.layers.RandomTranslation(TRANSLATION, TRANSLATION, fill_mode="reflect"))

    def normalised(layer: Any) -> list[Any]:
        return [
            layer,
            keras.layers.BatchNormalization(momentum=BN_MOMENTUM),
            keras.layers.ReLU(6.0),
        ]

    layers += normalised(
        keras.layers.Conv2D(int(STEM_FILTERS * ALPHA), 3, strides=2, padding="same", use_bias=False)
    )
    for filters, stride in BLOCKS:
        layers += normalised(
            keras.layers.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False)
        )
        layers += normalised(keras.layers.Conv2D(int(filters * ALPHA), 1, use_bias=False))
    layers += [
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dropout(DROPOUT),
        keras.layers.Dense(num_classes),
    ]
    model = keras.Sequential(layers, name="pi_mobilenet")
    return compile_model(model, learning_rate, steps_per_execution)

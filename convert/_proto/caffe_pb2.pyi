# ruff: noqa
# fmt: off
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRAIN: _ClassVar[Phase]
    TEST: _ClassVar[Phase]
TRAIN: Phase
TEST: Phase

class BlobShape(_message.Message):
    __slots__ = ("dim",)
    DIM_FIELD_NUMBER: _ClassVar[int]
    dim: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dim: _Optional[_Iterable[int]] = ...) -> None: ...

class BlobProto(_message.Message):
    __slots__ = ("shape", "data", "diff", "double_data", "double_diff", "num", "channels", "height", "width")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_DATA_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_DIFF_FIELD_NUMBER: _ClassVar[int]
    NUM_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    shape: BlobShape
    data: _containers.RepeatedScalarFieldContainer[float]
    diff: _containers.RepeatedScalarFieldContainer[float]
    double_data: _containers.RepeatedScalarFieldContainer[float]
    double_diff: _containers.RepeatedScalarFieldContainer[float]
    num: int
    channels: int
    height: int
    width: int
    def __init__(self, shape: _Optional[_Union[BlobShape, _Mapping]] = ..., data: _Optional[_Iterable[float]] = ..., diff: _Optional[_Iterable[float]] = ..., double_data: _Optional[_Iterable[float]] = ..., double_diff: _Optional[_Iterable[float]] = ..., num: _Optional[int] = ..., channels: _Optional[int] = ..., height: _Optional[int] = ..., width: _Optional[int] = ...) -> None: ...

class BlobProtoVector(_message.Message):
    __slots__ = ("blobs",)
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    def __init__(self, blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ...) -> None: ...

class NetParameter(_message.Message):
    __slots__ = ("name", "input", "input_shape", "input_dim", "force_backward", "state", "debug_info", "layer", "layers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHAPE_FIELD_NUMBER: _ClassVar[int]
    INPUT_DIM_FIELD_NUMBER: _ClassVar[int]
    FORCE_BACKWARD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DEBUG_INFO_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    input: _containers.RepeatedScalarFieldContainer[str]
    input_shape: _containers.RepeatedCompositeFieldContainer[BlobShape]
    input_dim: _containers.RepeatedScalarFieldContainer[int]
    force_backward: bool
    state: NetState
    debug_info: bool
    layer: _containers.RepeatedCompositeFieldContainer[LayerParameter]
    layers: _containers.RepeatedCompositeFieldContainer[V1LayerParameter]
    def __init__(self, name: _Optional[str] = ..., input: _Optional[_Iterable[str]] = ..., input_shape: _Optional[_Iterable[_Union[BlobShape, _Mapping]]] = ..., input_dim: _Optional[_Iterable[int]] = ..., force_backward: _Optional[bool] = ..., state: _Optional[_Union[NetState, _Mapping]] = ..., debug_info: _Optional[bool] = ..., layer: _Optional[_Iterable[_Union[LayerParameter, _Mapping]]] = ..., layers: _Optional[_Iterable[_Union[V1LayerParameter, _Mapping]]] = ...) -> None: ...

class NetState(_message.Message):
    __slots__ = ("phase", "level", "stage")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    level: int
    stage: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., level: _Optional[int] = ..., stage: _Optional[_Iterable[str]] = ...) -> None: ...

class NetStateRule(_message.Message):
    __slots__ = ("phase", "min_level", "max_level", "stage", "not_stage")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    MIN_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_LEVEL_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    NOT_STAGE_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    min_level: int
    max_level: int
    stage: _containers.RepeatedScalarFieldContainer[str]
    not_stage: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., min_level: _Optional[int] = ..., max_level: _Optional[int] = ..., stage: _Optional[_Iterable[str]] = ..., not_stage: _Optional[_Iterable[str]] = ...) -> None: ...

class ParamSpec(_message.Message):
    __slots__ = ("name", "share_mode", "lr_mult", "decay_mult")
    class DimCheckMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STRICT: _ClassVar[ParamSpec.DimCheckMode]
        PERMISSIVE: _ClassVar[ParamSpec.DimCheckMode]
    STRICT: ParamSpec.DimCheckMode
    PERMISSIVE: ParamSpec.DimCheckMode
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARE_MODE_FIELD_NUMBER: _ClassVar[int]
    LR_MULT_FIELD_NUMBER: _ClassVar[int]
    DECAY_MULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    share_mode: ParamSpec.DimCheckMode
    lr_mult: float
    decay_mult: float
    def __init__(self, name: _Optional[str] = ..., share_mode: _Optional[_Union[ParamSpec.DimCheckMode, str]] = ..., lr_mult: _Optional[float] = ..., decay_mult: _Optional[float] = ...) -> None: ...

class LayerParameter(_message.Message):
    __slots__ = ("name", "type", "bottom", "top", "phase", "loss_weight", "param", "blobs", "propagate_down", "include", "exclude", "transform_param", "loss_param", "accuracy_param", "argmax_param", "batch_norm_param", "bias_param", "clip_param", "concat_param", "convolution_param", "crop_param", "dropout_param", "eltwise_param", "elu_param", "exp_param", "flatten_param", "inner_product_param", "input_param", "log_param", "lrn_param", "mvn_param", "parameter_param", "pooling_param", "power_param", "prelu_param", "reduction_param", "relu_param", "reshape_param", "scale_param", "sigmoid_param", "softmax_param", "slice_param", "swish_param", "tanh_param", "threshold_param", "tile_param", "permute_param", "prior_box_param", "detection_output_param", "norm_param", "upsample_param", "interp_param", "bn_param", "shuffle_channel_param", "resize_param")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    LOSS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    PROPAGATE_DOWN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_PARAM_FIELD_NUMBER: _ClassVar[int]
    LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_PARAM_FIELD_NUMBER: _ClassVar[int]
    ARGMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    BATCH_NORM_PARAM_FIELD_NUMBER: _ClassVar[int]
    BIAS_PARAM_FIELD_NUMBER: _ClassVar[int]
    CLIP_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONCAT_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_PARAM_FIELD_NUMBER: _ClassVar[int]
    CROP_PARAM_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    ELTWISE_PARAM_FIELD_NUMBER: _ClassVar[int]
    ELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    EXP_PARAM_FIELD_NUMBER: _ClassVar[int]
    FLATTEN_PARAM_FIELD_NUMBER: _ClassVar[int]
    INNER_PRODUCT_PARAM_FIELD_NUMBER: _ClassVar[int]
    INPUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    LOG_PARAM_FIELD_NUMBER: _ClassVar[int]
    LRN_PARAM_FIELD_NUMBER: _ClassVar[int]
    MVN_PARAM_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_PARAM_FIELD_NUMBER: _ClassVar[int]
    POOLING_PARAM_FIELD_NUMBER: _ClassVar[int]
    POWER_PARAM_FIELD_NUMBER: _ClassVar[int]
    PRELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    REDUCTION_PARAM_FIELD_NUMBER: _ClassVar[int]
    RELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    RESHAPE_PARAM_FIELD_NUMBER: _ClassVar[int]
    SCALE_PARAM_FIELD_NUMBER: _ClassVar[int]
    SIGMOID_PARAM_FIELD_NUMBER: _ClassVar[int]
    SOFTMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    SLICE_PARAM_FIELD_NUMBER: _ClassVar[int]
    SWISH_PARAM_FIELD_NUMBER: _ClassVar[int]
    TANH_PARAM_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_PARAM_FIELD_NUMBER: _ClassVar[int]
    TILE_PARAM_FIELD_NUMBER: _ClassVar[int]
    PERMUTE_PARAM_FIELD_NUMBER: _ClassVar[int]
    PRIOR_BOX_PARAM_FIELD_NUMBER: _ClassVar[int]
    DETECTION_OUTPUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    NORM_PARAM_FIELD_NUMBER: _ClassVar[int]
    UPSAMPLE_PARAM_FIELD_NUMBER: _ClassVar[int]
    INTERP_PARAM_FIELD_NUMBER: _ClassVar[int]
    BN_PARAM_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_CHANNEL_PARAM_FIELD_NUMBER: _ClassVar[int]
    RESIZE_PARAM_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    bottom: _containers.RepeatedScalarFieldContainer[str]
    top: _containers.RepeatedScalarFieldContainer[str]
    phase: Phase
    loss_weight: _containers.RepeatedScalarFieldContainer[float]
    param: _containers.RepeatedCompositeFieldContainer[ParamSpec]
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    propagate_down: _containers.RepeatedScalarFieldContainer[bool]
    include: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    exclude: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    transform_param: TransformationParameter
    loss_param: LossParameter
    accuracy_param: AccuracyParameter
    argmax_param: ArgMaxParameter
    batch_norm_param: BatchNormParameter
    bias_param: BiasParameter
    clip_param: ClipParameter
    concat_param: ConcatParameter
    convolution_param: ConvolutionParameter
    crop_param: CropParameter
    dropout_param: DropoutParameter
    eltwise_param: EltwiseParameter
    elu_param: ELUParameter
    exp_param: ExpParameter
    flatten_param: FlattenParameter
    inner_product_param: InnerProductParameter
    input_param: InputParameter
    log_param: LogParameter
    lrn_param: LRNParameter
    mvn_param: MVNParameter
    parameter_param: ParameterParameter
    pooling_param: PoolingParameter
    power_param: PowerParameter
    prelu_param: PReLUParameter
    reduction_param: ReductionParameter
    relu_param: ReLUParameter
    reshape_param: ReshapeParameter
    scale_param: ScaleParameter
    sigmoid_param: SigmoidParameter
    softmax_param: SoftmaxParameter
    slice_param: SliceParameter
    swish_param: SwishParameter
    tanh_param: TanHParameter
    threshold_param: ThresholdParameter
    tile_param: TileParameter
    permute_param: PermuteParameter
    prior_box_param: PriorBoxParameter
    detection_output_param: DetectionOutputParameter
    norm_param: NormalizeParameter
    upsample_param: UpsampleParameter
    interp_param: InterpParameter
    bn_param: BNParameter
    shuffle_channel_param: ShuffleChannelParameter
    resize_param: ResizeParameter
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., bottom: _Optional[_Iterable[str]] = ..., top: _Optional[_Iterable[str]] = ..., phase: _Optional[_Union[Phase, str]] = ..., loss_weight: _Optional[_Iterable[float]] = ..., param: _Optional[_Iterable[_Union[ParamSpec, _Mapping]]] = ..., blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ..., propagate_down: _Optional[_Iterable[bool]] = ..., include: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., exclude: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., transform_param: _Optional[_Union[TransformationParameter, _Mapping]] = ..., loss_param: _Optional[_Union[LossParameter, _Mapping]] = ..., accuracy_param: _Optional[_Union[AccuracyParameter, _Mapping]] = ..., argmax_param: _Optional[_Union[ArgMaxParameter, _Mapping]] = ..., batch_norm_param: _Optional[_Union[BatchNormParameter, _Mapping]] = ..., bias_param: _Optional[_Union[BiasParameter, _Mapping]] = ..., clip_param: _Optional[_Union[ClipParameter, _Mapping]] = ..., concat_param: _Optional[_Union[ConcatParameter, _Mapping]] = ..., convolution_param: _Optional[_Union[ConvolutionParameter, _Mapping]] = ..., crop_param: _Optional[_Union[CropParameter, _Mapping]] = ..., dropout_param: _Optional[_Union[DropoutParameter, _Mapping]] = ..., eltwise_param: _Optional[_Union[EltwiseParameter, _Mapping]] = ..., elu_param: _Optional[_Union[ELUParameter, _Mapping]] = ..., exp_param: _Optional[_Union[ExpParameter, _Mapping]] = ..., flatten_param: _Optional[_Union[FlattenParameter, _Mapping]] = ..., inner_product_param: _Optional[_Union[InnerProductParameter, _Mapping]] = ..., input_param: _Optional[_Union[InputParameter, _Mapping]] = ..., log_param: _Optional[_Union[LogParameter, _Mapping]] = ..., lrn_param: _Optional[_Union[LRNParameter, _Mapping]] = ..., mvn_param: _Optional[_Union[MVNParameter, _Mapping]] = ..., parameter_param: _Optional[_Union[ParameterParameter, _Mapping]] = ..., pooling_param: _Optional[_Union[PoolingParameter, _Mapping]] = ..., power_param: _Optional[_Union[PowerParameter, _Mapping]] = ..., prelu_param: _Optional[_Union[PReLUParameter, _Mapping]] = ..., reduction_param: _Optional[_Union[ReductionParameter, _Mapping]] = ..., relu_param: _Optional[_Union[ReLUParameter, _Mapping]] = ..., reshape_param: _Optional[_Union[ReshapeParameter, _Mapping]] = ..., scale_param: _Optional[_Union[ScaleParameter, _Mapping]] = ..., sigmoid_param: _Optional[_Union[SigmoidParameter, _Mapping]] = ..., softmax_param: _Optional[_Union[SoftmaxParameter, _Mapping]] = ..., slice_param: _Optional[_Union[SliceParameter, _Mapping]] = ..., swish_param: _Optional[_Union[SwishParameter, _Mapping]] = ..., tanh_param: _Optional[_Union[TanHParameter, _Mapping]] = ..., threshold_param: _Optional[_Union[ThresholdParameter, _Mapping]] = ..., tile_param: _Optional[_Union[TileParameter, _Mapping]] = ..., permute_param: _Optional[_Union[PermuteParameter, _Mapping]] = ..., prior_box_param: _Optional[_Union[PriorBoxParameter, _Mapping]] = ..., detection_output_param: _Optional[_Union[DetectionOutputParameter, _Mapping]] = ..., norm_param: _Optional[_Union[NormalizeParameter, _Mapping]] = ..., upsample_param: _Optional[_Union[UpsampleParameter, _Mapping]] = ..., interp_param: _Optional[_Union[InterpParameter, _Mapping]] = ..., bn_param: _Optional[_Union[BNParameter, _Mapping]] = ..., shuffle_channel_param: _Optional[_Union[ShuffleChannelParameter, _Mapping]] = ..., resize_param: _Optional[_Union[ResizeParameter, _Mapping]] = ...) -> None: ...

class TransformationParameter(_message.Message):
    __slots__ = ("scale", "mirror", "crop_size", "mean_file", "mean_value", "force_color", "force_gray")
    SCALE_FIELD_NUMBER: _ClassVar[int]
    MIRROR_FIELD_NUMBER: _ClassVar[int]
    CROP_SIZE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FILE_FIELD_NUMBER: _ClassVar[int]
    MEAN_VALUE_FIELD_NUMBER: _ClassVar[int]
    FORCE_COLOR_FIELD_NUMBER: _ClassVar[int]
    FORCE_GRAY_FIELD_NUMBER: _ClassVar[int]
    scale: float
    mirror: bool
    crop_size: int
    mean_file: str
    mean_value: _containers.RepeatedScalarFieldContainer[float]
    force_color: bool
    force_gray: bool
    def __init__(self, scale: _Optional[float] = ..., mirror: _Optional[bool] = ..., crop_size: _Optional[int] = ..., mean_file: _Optional[str] = ..., mean_value: _Optional[_Iterable[float]] = ..., force_color: _Optional[bool] = ..., force_gray: _Optional[bool] = ...) -> None: ...

class LossParameter(_message.Message):
    __slots__ = ("ignore_label", "normalization", "normalize")
    class NormalizationMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FULL: _ClassVar[LossParameter.NormalizationMode]
        VALID: _ClassVar[LossParameter.NormalizationMode]
        BATCH_SIZE: _ClassVar[LossParameter.NormalizationMode]
        NONE: _ClassVar[LossParameter.NormalizationMode]
    FULL: LossParameter.NormalizationMode
    VALID: LossParameter.NormalizationMode
    BATCH_SIZE: LossParameter.NormalizationMode
    NONE: LossParameter.NormalizationMode
    IGNORE_LABEL_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    ignore_label: int
    normalization: LossParameter.NormalizationMode
    normalize: bool
    def __init__(self, ignore_label: _Optional[int] = ..., normalization: _Optional[_Union[LossParameter.NormalizationMode, str]] = ..., normalize: _Optional[bool] = ...) -> None: ...

class AccuracyParameter(_message.Message):
    __slots__ = ("top_k", "axis", "ignore_label")
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_LABEL_FIELD_NUMBER: _ClassVar[int]
    top_k: int
    axis: int
    ignore_label: int
    def __init__(self, top_k: _Optional[int] = ..., axis: _Optional[int] = ..., ignore_label: _Optional[int] = ...) -> None: ...

class ArgMaxParameter(_message.Message):
    __slots__ = ("out_max_val", "top_k", "axis")
    OUT_MAX_VAL_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    out_max_val: bool
    top_k: int
    axis: int
    def __init__(self, out_max_val: _Optional[bool] = ..., top_k: _Optional[int] = ..., axis: _Optional[int] = ...) -> None: ...

class FillerParameter(_message.Message):
    __slots__ = ("type", "value", "min", "max", "mean", "std", "sparse", "variance_norm")
    class VarianceNorm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FAN_IN: _ClassVar[FillerParameter.VarianceNorm]
        FAN_OUT: _ClassVar[FillerParameter.VarianceNorm]
        AVERAGE: _ClassVar[FillerParameter.VarianceNorm]
    FAN_IN: FillerParameter.VarianceNorm
    FAN_OUT: FillerParameter.VarianceNorm
    AVERAGE: FillerParameter.VarianceNorm
    TYPE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    VARIANCE_NORM_FIELD_NUMBER: _ClassVar[int]
    type: str
    value: float
    min: float
    max: float
    mean: float
    std: float
    sparse: int
    variance_norm: FillerParameter.VarianceNorm
    def __init__(self, type: _Optional[str] = ..., value: _Optional[float] = ..., min: _Optional[float] = ..., max: _Optional[float] = ..., mean: _Optional[float] = ..., std: _Optional[float] = ..., sparse: _Optional[int] = ..., variance_norm: _Optional[_Union[FillerParameter.VarianceNorm, str]] = ...) -> None: ...

class BNParameter(_message.Message):
    __slots__ = ("slope_filler", "bias_filler", "momentum", "eps", "frozen", "engine")
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[BNParameter.Engine]
        CAFFE: _ClassVar[BNParameter.Engine]
        CUDNN: _ClassVar[BNParameter.Engine]
    DEFAULT: BNParameter.Engine
    CAFFE: BNParameter.Engine
    CUDNN: BNParameter.Engine
    SLOPE_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    FROZEN_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    slope_filler: FillerParameter
    bias_filler: FillerParameter
    momentum: float
    eps: float
    frozen: bool
    engine: BNParameter.Engine
    def __init__(self, slope_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., momentum: _Optional[float] = ..., eps: _Optional[float] = ..., frozen: _Optional[bool] = ..., engine: _Optional[_Union[BNParameter.Engine, str]] = ...) -> None: ...

class BatchNormParameter(_message.Message):
    __slots__ = ("use_global_stats", "moving_average_fraction", "eps")
    USE_GLOBAL_STATS_FIELD_NUMBER: _ClassVar[int]
    MOVING_AVERAGE_FRACTION_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    use_global_stats: bool
    moving_average_fraction: float
    eps: float
    def __init__(self, use_global_stats: _Optional[bool] = ..., moving_average_fraction: _Optional[float] = ..., eps: _Optional[float] = ...) -> None: ...

class BiasParameter(_message.Message):
    __slots__ = ("axis", "num_axes", "filler")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    NUM_AXES_FIELD_NUMBER: _ClassVar[int]
    FILLER_FIELD_NUMBER: _ClassVar[int]
    axis: int
    num_axes: int
    filler: FillerParameter
    def __init__(self, axis: _Optional[int] = ..., num_axes: _Optional[int] = ..., filler: _Optional[_Union[FillerParameter, _Mapping]] = ...) -> None: ...

class ClipParameter(_message.Message):
    __slots__ = ("min", "max")
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    min: float
    max: float
    def __init__(self, min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class ConcatParameter(_message.Message):
    __slots__ = ("axis", "concat_dim")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    CONCAT_DIM_FIELD_NUMBER: _ClassVar[int]
    axis: int
    concat_dim: int
    def __init__(self, axis: _Optional[int] = ..., concat_dim: _Optional[int] = ...) -> None: ...

class ConvolutionParameter(_message.Message):
    __slots__ = ("num_output", "bias_term", "pad", "kernel_size", "stride", "dilation", "pad_h", "pad_w", "kernel_h", "kernel_w", "stride_h", "stride_w", "group", "weight_filler", "bias_filler", "engine", "axis", "force_nd_im2col")
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[ConvolutionParameter.Engine]
        CAFFE: _ClassVar[ConvolutionParameter.Engine]
        CUDNN: _ClassVar[ConvolutionParameter.Engine]
    DEFAULT: ConvolutionParameter.Engine
    CAFFE: ConvolutionParameter.Engine
    CUDNN: ConvolutionParameter.Engine
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    DILATION_FIELD_NUMBER: _ClassVar[int]
    PAD_H_FIELD_NUMBER: _ClassVar[int]
    PAD_W_FIELD_NUMBER: _ClassVar[int]
    KERNEL_H_FIELD_NUMBER: _ClassVar[int]
    KERNEL_W_FIELD_NUMBER: _ClassVar[int]
    STRIDE_H_FIELD_NUMBER: _ClassVar[int]
    STRIDE_W_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    FORCE_ND_IM2COL_FIELD_NUMBER: _ClassVar[int]
    num_output: int
    bias_term: bool
    pad: _containers.RepeatedScalarFieldContainer[int]
    kernel_size: _containers.RepeatedScalarFieldContainer[int]
    stride: _containers.RepeatedScalarFieldContainer[int]
    dilation: _containers.RepeatedScalarFieldContainer[int]
    pad_h: int
    pad_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    group: int
    weight_filler: FillerParameter
    bias_filler: FillerParameter
    engine: ConvolutionParameter.Engine
    axis: int
    force_nd_im2col: bool
    def __init__(self, num_output: _Optional[int] = ..., bias_term: _Optional[bool] = ..., pad: _Optional[_Iterable[int]] = ..., kernel_size: _Optional[_Iterable[int]] = ..., stride: _Optional[_Iterable[int]] = ..., dilation: _Optional[_Iterable[int]] = ..., pad_h: _Optional[int] = ..., pad_w: _Optional[int] = ..., kernel_h: _Optional[int] = ..., kernel_w: _Optional[int] = ..., stride_h: _Optional[int] = ..., stride_w: _Optional[int] = ..., group: _Optional[int] = ..., weight_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., engine: _Optional[_Union[ConvolutionParameter.Engine, str]] = ..., axis: _Optional[int] = ..., force_nd_im2col: _Optional[bool] = ...) -> None: ...

class CropParameter(_message.Message):
    __slots__ = ("axis", "offset")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    axis: int
    offset: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, axis: _Optional[int] = ..., offset: _Optional[_Iterable[int]] = ...) -> None: ...

class DropoutParameter(_message.Message):
    __slots__ = ("dropout_ratio",)
    DROPOUT_RATIO_FIELD_NUMBER: _ClassVar[int]
    dropout_ratio: float
    def __init__(self, dropout_ratio: _Optional[float] = ...) -> None: ...

class EltwiseParameter(_message.Message):
    __slots__ = ("operation", "coeff", "stable_prod_grad")
    class EltwiseOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PROD: _ClassVar[EltwiseParameter.EltwiseOp]
        SUM: _ClassVar[EltwiseParameter.EltwiseOp]
        MAX: _ClassVar[EltwiseParameter.EltwiseOp]
    PROD: EltwiseParameter.EltwiseOp
    SUM: EltwiseParameter.EltwiseOp
    MAX: EltwiseParameter.EltwiseOp
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    COEFF_FIELD_NUMBER: _ClassVar[int]
    STABLE_PROD_GRAD_FIELD_NUMBER: _ClassVar[int]
    operation: EltwiseParameter.EltwiseOp
    coeff: _containers.RepeatedScalarFieldContainer[float]
    stable_prod_grad: bool
    def __init__(self, operation: _Optional[_Union[EltwiseParameter.EltwiseOp, str]] = ..., coeff: _Optional[_Iterable[float]] = ..., stable_prod_grad: _Optional[bool] = ...) -> None: ...

class ELUParameter(_message.Message):
    __slots__ = ("alpha",)
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    alpha: float
    def __init__(self, alpha: _Optional[float] = ...) -> None: ...

class ExpParameter(_message.Message):
    __slots__ = ("base", "scale", "shift")
    BASE_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    base: float
    scale: float
    shift: float
    def __init__(self, base: _Optional[float] = ..., scale: _Optional[float] = ..., shift: _Optional[float] = ...) -> None: ...

class FlattenParameter(_message.Message):
    __slots__ = ("axis", "end_axis")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    END_AXIS_FIELD_NUMBER: _ClassVar[int]
    axis: int
    end_axis: int
    def __init__(self, axis: _Optional[int] = ..., end_axis: _Optional[int] = ...) -> None: ...

class InnerProductParameter(_message.Message):
    __slots__ = ("num_output", "bias_term", "weight_filler", "bias_filler", "axis", "transpose")
    NUM_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    TRANSPOSE_FIELD_NUMBER: _ClassVar[int]
    num_output: int
    bias_term: bool
    weight_filler: FillerParameter
    bias_filler: FillerParameter
    axis: int
    transpose: bool
    def __init__(self, num_output: _Optional[int] = ..., bias_term: _Optional[bool] = ..., weight_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., axis: _Optional[int] = ..., transpose: _Optional[bool] = ...) -> None: ...

class InputParameter(_message.Message):
    __slots__ = ("shape",)
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedCompositeFieldContainer[BlobShape]
    def __init__(self, shape: _Optional[_Iterable[_Union[BlobShape, _Mapping]]] = ...) -> None: ...

class LogParameter(_message.Message):
    __slots__ = ("base", "scale", "shift")
    BASE_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    base: float
    scale: float
    shift: float
    def __init__(self, base: _Optional[float] = ..., scale: _Optional[float] = ..., shift: _Optional[float] = ...) -> None: ...

class LRNParameter(_message.Message):
    __slots__ = ("local_size", "alpha", "beta", "norm_region", "k", "engine")
    class NormRegion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACROSS_CHANNELS: _ClassVar[LRNParameter.NormRegion]
        WITHIN_CHANNEL: _ClassVar[LRNParameter.NormRegion]
    ACROSS_CHANNELS: LRNParameter.NormRegion
    WITHIN_CHANNEL: LRNParameter.NormRegion
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[LRNParameter.Engine]
        CAFFE: _ClassVar[LRNParameter.Engine]
        CUDNN: _ClassVar[LRNParameter.Engine]
    DEFAULT: LRNParameter.Engine
    CAFFE: LRNParameter.Engine
    CUDNN: LRNParameter.Engine
    LOCAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    NORM_REGION_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    local_size: int
    alpha: float
    beta: float
    norm_region: LRNParameter.NormRegion
    k: float
    engine: LRNParameter.Engine
    def __init__(self, local_size: _Optional[int] = ..., alpha: _Optional[float] = ..., beta: _Optional[float] = ..., norm_region: _Optional[_Union[LRNParameter.NormRegion, str]] = ..., k: _Optional[float] = ..., engine: _Optional[_Union[LRNParameter.Engine, str]] = ...) -> None: ...

class MVNParameter(_message.Message):
    __slots__ = ("normalize_variance", "across_channels", "eps")
    NORMALIZE_VARIANCE_FIELD_NUMBER: _ClassVar[int]
    ACROSS_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    normalize_variance: bool
    across_channels: bool
    eps: float
    def __init__(self, normalize_variance: _Optional[bool] = ..., across_channels: _Optional[bool] = ..., eps: _Optional[float] = ...) -> None: ...

class ParameterParameter(_message.Message):
    __slots__ = ("shape",)
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    shape: BlobShape
    def __init__(self, shape: _Optional[_Union[BlobShape, _Mapping]] = ...) -> None: ...

class PoolingParameter(_message.Message):
    __slots__ = ("pool", "pad", "pad_h", "pad_w", "kernel_size", "kernel_h", "kernel_w", "stride", "stride_h", "stride_w", "engine", "global_pooling", "round_mode", "ceil_mode")
    class PoolMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MAX: _ClassVar[PoolingParameter.PoolMethod]
        AVE: _ClassVar[PoolingParameter.PoolMethod]
        STOCHASTIC: _ClassVar[PoolingParameter.PoolMethod]
    MAX: PoolingParameter.PoolMethod
    AVE: PoolingParameter.PoolMethod
    STOCHASTIC: PoolingParameter.PoolMethod
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[PoolingParameter.Engine]
        CAFFE: _ClassVar[PoolingParameter.Engine]
        CUDNN: _ClassVar[PoolingParameter.Engine]
    DEFAULT: PoolingParameter.Engine
    CAFFE: PoolingParameter.Engine
    CUDNN: PoolingParameter.Engine
    class RoundMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CEIL: _ClassVar[PoolingParameter.RoundMode]
        FLOOR: _ClassVar[PoolingParameter.RoundMode]
    CEIL: PoolingParameter.RoundMode
    FLOOR: PoolingParameter.RoundMode
    POOL_FIELD_NUMBER: _ClassVar[int]
    PAD_FIELD_NUMBER: _ClassVar[int]
    PAD_H_FIELD_NUMBER: _ClassVar[int]
    PAD_W_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_H_FIELD_NUMBER: _ClassVar[int]
    KERNEL_W_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_H_FIELD_NUMBER: _ClassVar[int]
    STRIDE_W_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_POOLING_FIELD_NUMBER: _ClassVar[int]
    ROUND_MODE_FIELD_NUMBER: _ClassVar[int]
    CEIL_MODE_FIELD_NUMBER: _ClassVar[int]
    pool: PoolingParameter.PoolMethod
    pad: int
    pad_h: int
    pad_w: int
    kernel_size: int
    kernel_h: int
    kernel_w: int
    stride: int
    stride_h: int
    stride_w: int
    engine: PoolingParameter.Engine
    global_pooling: bool
    round_mode: PoolingParameter.RoundMode
    ceil_mode: bool
    def __init__(self, pool: _Optional[_Union[PoolingParameter.PoolMethod, str]] = ..., pad: _Optional[int] = ..., pad_h: _Optional[int] = ..., pad_w: _Optional[int] = ..., kernel_size: _Optional[int] = ..., kernel_h: _Optional[int] = ..., kernel_w: _Optional[int] = ..., stride: _Optional[int] = ..., stride_h: _Optional[int] = ..., stride_w: _Optional[int] = ..., engine: _Optional[_Union[PoolingParameter.Engine, str]] = ..., global_pooling: _Optional[bool] = ..., round_mode: _Optional[_Union[PoolingParameter.RoundMode, str]] = ..., ceil_mode: _Optional[bool] = ...) -> None: ...

class PowerParameter(_message.Message):
    __slots__ = ("power", "scale", "shift")
    POWER_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SHIFT_FIELD_NUMBER: _ClassVar[int]
    power: float
    scale: float
    shift: float
    def __init__(self, power: _Optional[float] = ..., scale: _Optional[float] = ..., shift: _Optional[float] = ...) -> None: ...

class PReLUParameter(_message.Message):
    __slots__ = ("filler", "channel_shared")
    FILLER_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_SHARED_FIELD_NUMBER: _ClassVar[int]
    filler: FillerParameter
    channel_shared: bool
    def __init__(self, filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., channel_shared: _Optional[bool] = ...) -> None: ...

class ReductionParameter(_message.Message):
    __slots__ = ("operation", "axis", "coeff")
    class ReductionOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUM: _ClassVar[ReductionParameter.ReductionOp]
        ASUM: _ClassVar[ReductionParameter.ReductionOp]
        SUMSQ: _ClassVar[ReductionParameter.ReductionOp]
        MEAN: _ClassVar[ReductionParameter.ReductionOp]
    SUM: ReductionParameter.ReductionOp
    ASUM: ReductionParameter.ReductionOp
    SUMSQ: ReductionParameter.ReductionOp
    MEAN: ReductionParameter.ReductionOp
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    COEFF_FIELD_NUMBER: _ClassVar[int]
    operation: ReductionParameter.ReductionOp
    axis: int
    coeff: float
    def __init__(self, operation: _Optional[_Union[ReductionParameter.ReductionOp, str]] = ..., axis: _Optional[int] = ..., coeff: _Optional[float] = ...) -> None: ...

class ReLUParameter(_message.Message):
    __slots__ = ("negative_slope", "engine")
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[ReLUParameter.Engine]
        CAFFE: _ClassVar[ReLUParameter.Engine]
        CUDNN: _ClassVar[ReLUParameter.Engine]
    DEFAULT: ReLUParameter.Engine
    CAFFE: ReLUParameter.Engine
    CUDNN: ReLUParameter.Engine
    NEGATIVE_SLOPE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    negative_slope: float
    engine: ReLUParameter.Engine
    def __init__(self, negative_slope: _Optional[float] = ..., engine: _Optional[_Union[ReLUParameter.Engine, str]] = ...) -> None: ...

class ReshapeParameter(_message.Message):
    __slots__ = ("shape", "axis", "num_axes")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    NUM_AXES_FIELD_NUMBER: _ClassVar[int]
    shape: BlobShape
    axis: int
    num_axes: int
    def __init__(self, shape: _Optional[_Union[BlobShape, _Mapping]] = ..., axis: _Optional[int] = ..., num_axes: _Optional[int] = ...) -> None: ...

class ScaleParameter(_message.Message):
    __slots__ = ("axis", "num_axes", "filler", "bias_term", "bias_filler")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    NUM_AXES_FIELD_NUMBER: _ClassVar[int]
    FILLER_FIELD_NUMBER: _ClassVar[int]
    BIAS_TERM_FIELD_NUMBER: _ClassVar[int]
    BIAS_FILLER_FIELD_NUMBER: _ClassVar[int]
    axis: int
    num_axes: int
    filler: FillerParameter
    bias_term: bool
    bias_filler: FillerParameter
    def __init__(self, axis: _Optional[int] = ..., num_axes: _Optional[int] = ..., filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., bias_term: _Optional[bool] = ..., bias_filler: _Optional[_Union[FillerParameter, _Mapping]] = ...) -> None: ...

class SigmoidParameter(_message.Message):
    __slots__ = ("engine",)
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[SigmoidParameter.Engine]
        CAFFE: _ClassVar[SigmoidParameter.Engine]
        CUDNN: _ClassVar[SigmoidParameter.Engine]
    DEFAULT: SigmoidParameter.Engine
    CAFFE: SigmoidParameter.Engine
    CUDNN: SigmoidParameter.Engine
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    engine: SigmoidParameter.Engine
    def __init__(self, engine: _Optional[_Union[SigmoidParameter.Engine, str]] = ...) -> None: ...

class SliceParameter(_message.Message):
    __slots__ = ("axis", "slice_point", "slice_dim")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    SLICE_POINT_FIELD_NUMBER: _ClassVar[int]
    SLICE_DIM_FIELD_NUMBER: _ClassVar[int]
    axis: int
    slice_point: _containers.RepeatedScalarFieldContainer[int]
    slice_dim: int
    def __init__(self, axis: _Optional[int] = ..., slice_point: _Optional[_Iterable[int]] = ..., slice_dim: _Optional[int] = ...) -> None: ...

class SoftmaxParameter(_message.Message):
    __slots__ = ("engine", "axis")
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[SoftmaxParameter.Engine]
        CAFFE: _ClassVar[SoftmaxParameter.Engine]
        CUDNN: _ClassVar[SoftmaxParameter.Engine]
    DEFAULT: SoftmaxParameter.Engine
    CAFFE: SoftmaxParameter.Engine
    CUDNN: SoftmaxParameter.Engine
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    engine: SoftmaxParameter.Engine
    axis: int
    def __init__(self, engine: _Optional[_Union[SoftmaxParameter.Engine, str]] = ..., axis: _Optional[int] = ...) -> None: ...

class SwishParameter(_message.Message):
    __slots__ = ("beta",)
    BETA_FIELD_NUMBER: _ClassVar[int]
    beta: float
    def __init__(self, beta: _Optional[float] = ...) -> None: ...

class TanHParameter(_message.Message):
    __slots__ = ("engine",)
    class Engine(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DEFAULT: _ClassVar[TanHParameter.Engine]
        CAFFE: _ClassVar[TanHParameter.Engine]
        CUDNN: _ClassVar[TanHParameter.Engine]
    DEFAULT: TanHParameter.Engine
    CAFFE: TanHParameter.Engine
    CUDNN: TanHParameter.Engine
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    engine: TanHParameter.Engine
    def __init__(self, engine: _Optional[_Union[TanHParameter.Engine, str]] = ...) -> None: ...

class ThresholdParameter(_message.Message):
    __slots__ = ("threshold",)
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    threshold: float
    def __init__(self, threshold: _Optional[float] = ...) -> None: ...

class TileParameter(_message.Message):
    __slots__ = ("axis", "tiles")
    AXIS_FIELD_NUMBER: _ClassVar[int]
    TILES_FIELD_NUMBER: _ClassVar[int]
    axis: int
    tiles: int
    def __init__(self, axis: _Optional[int] = ..., tiles: _Optional[int] = ...) -> None: ...

class PermuteParameter(_message.Message):
    __slots__ = ("order",)
    ORDER_FIELD_NUMBER: _ClassVar[int]
    order: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, order: _Optional[_Iterable[int]] = ...) -> None: ...

class NormalizeParameter(_message.Message):
    __slots__ = ("across_spatial", "scale_filler", "channel_shared", "eps")
    ACROSS_SPATIAL_FIELD_NUMBER: _ClassVar[int]
    SCALE_FILLER_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_SHARED_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    across_spatial: bool
    scale_filler: FillerParameter
    channel_shared: bool
    eps: float
    def __init__(self, across_spatial: _Optional[bool] = ..., scale_filler: _Optional[_Union[FillerParameter, _Mapping]] = ..., channel_shared: _Optional[bool] = ..., eps: _Optional[float] = ...) -> None: ...

class PriorBoxParameter(_message.Message):
    __slots__ = ("min_size", "max_size", "aspect_ratio", "flip", "clip", "variance", "img_size", "img_h", "img_w", "step", "step_h", "step_w", "offset")
    class CodeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CORNER: _ClassVar[PriorBoxParameter.CodeType]
        CENTER_SIZE: _ClassVar[PriorBoxParameter.CodeType]
        CORNER_SIZE: _ClassVar[PriorBoxParameter.CodeType]
    CORNER: PriorBoxParameter.CodeType
    CENTER_SIZE: PriorBoxParameter.CodeType
    CORNER_SIZE: PriorBoxParameter.CodeType
    MIN_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    ASPECT_RATIO_FIELD_NUMBER: _ClassVar[int]
    FLIP_FIELD_NUMBER: _ClassVar[int]
    CLIP_FIELD_NUMBER: _ClassVar[int]
    VARIANCE_FIELD_NUMBER: _ClassVar[int]
    IMG_SIZE_FIELD_NUMBER: _ClassVar[int]
    IMG_H_FIELD_NUMBER: _ClassVar[int]
    IMG_W_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STEP_H_FIELD_NUMBER: _ClassVar[int]
    STEP_W_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    min_size: _containers.RepeatedScalarFieldContainer[float]
    max_size: _containers.RepeatedScalarFieldContainer[float]
    aspect_ratio: _containers.RepeatedScalarFieldContainer[float]
    flip: bool
    clip: bool
    variance: _containers.RepeatedScalarFieldContainer[float]
    img_size: int
    img_h: int
    img_w: int
    step: float
    step_h: float
    step_w: float
    offset: float
    def __init__(self, min_size: _Optional[_Iterable[float]] = ..., max_size: _Optional[_Iterable[float]] = ..., aspect_ratio: _Optional[_Iterable[float]] = ..., flip: _Optional[bool] = ..., clip: _Optional[bool] = ..., variance: _Optional[_Iterable[float]] = ..., img_size: _Optional[int] = ..., img_h: _Optional[int] = ..., img_w: _Optional[int] = ..., step: _Optional[float] = ..., step_h: _Optional[float] = ..., step_w: _Optional[float] = ..., offset: _Optional[float] = ...) -> None: ...

class NonMaximumSuppressionParameter(_message.Message):
    __slots__ = ("nms_threshold", "top_k", "eta")
    NMS_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    ETA_FIELD_NUMBER: _ClassVar[int]
    nms_threshold: float
    top_k: int
    eta: float
    def __init__(self, nms_threshold: _Optional[float] = ..., top_k: _Optional[int] = ..., eta: _Optional[float] = ...) -> None: ...

class DetectionOutputParameter(_message.Message):
    __slots__ = ("num_classes", "share_location", "background_label_id", "nms_param", "code_type", "variance_encoded_in_target", "keep_top_k", "confidence_threshold")
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    SHARE_LOCATION_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_LABEL_ID_FIELD_NUMBER: _ClassVar[int]
    NMS_PARAM_FIELD_NUMBER: _ClassVar[int]
    CODE_TYPE_FIELD_NUMBER: _ClassVar[int]
    VARIANCE_ENCODED_IN_TARGET_FIELD_NUMBER: _ClassVar[int]
    KEEP_TOP_K_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    num_classes: int
    share_location: bool
    background_label_id: int
    nms_param: NonMaximumSuppressionParameter
    code_type: PriorBoxParameter.CodeType
    variance_encoded_in_target: bool
    keep_top_k: int
    confidence_threshold: float
    def __init__(self, num_classes: _Optional[int] = ..., share_location: _Optional[bool] = ..., background_label_id: _Optional[int] = ..., nms_param: _Optional[_Union[NonMaximumSuppressionParameter, _Mapping]] = ..., code_type: _Optional[_Union[PriorBoxParameter.CodeType, str]] = ..., variance_encoded_in_target: _Optional[bool] = ..., keep_top_k: _Optional[int] = ..., confidence_threshold: _Optional[float] = ...) -> None: ...

class ResizeParameter(_message.Message):
    __slots__ = ("height", "width", "is_pyramid_test", "out_height_scale", "out_width_scale")
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    IS_PYRAMID_TEST_FIELD_NUMBER: _ClassVar[int]
    OUT_HEIGHT_SCALE_FIELD_NUMBER: _ClassVar[int]
    OUT_WIDTH_SCALE_FIELD_NUMBER: _ClassVar[int]
    height: int
    width: int
    is_pyramid_test: bool
    out_height_scale: float
    out_width_scale: float
    def __init__(self, height: _Optional[int] = ..., width: _Optional[int] = ..., is_pyramid_test: _Optional[bool] = ..., out_height_scale: _Optional[float] = ..., out_width_scale: _Optional[float] = ...) -> None: ...

class UpsampleParameter(_message.Message):
    __slots__ = ("scale", "scale_h", "scale_w", "pad_out_h", "pad_out_w", "upsample_h", "upsample_w")
    SCALE_FIELD_NUMBER: _ClassVar[int]
    SCALE_H_FIELD_NUMBER: _ClassVar[int]
    SCALE_W_FIELD_NUMBER: _ClassVar[int]
    PAD_OUT_H_FIELD_NUMBER: _ClassVar[int]
    PAD_OUT_W_FIELD_NUMBER: _ClassVar[int]
    UPSAMPLE_H_FIELD_NUMBER: _ClassVar[int]
    UPSAMPLE_W_FIELD_NUMBER: _ClassVar[int]
    scale: int
    scale_h: int
    scale_w: int
    pad_out_h: bool
    pad_out_w: bool
    upsample_h: int
    upsample_w: int
    def __init__(self, scale: _Optional[int] = ..., scale_h: _Optional[int] = ..., scale_w: _Optional[int] = ..., pad_out_h: _Optional[bool] = ..., pad_out_w: _Optional[bool] = ..., upsample_h: _Optional[int] = ..., upsample_w: _Optional[int] = ...) -> None: ...

class InterpParameter(_message.Message):
    __slots__ = ("height", "width", "zoom_factor", "shrink_factor", "pad_beg", "pad_end")
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    ZOOM_FACTOR_FIELD_NUMBER: _ClassVar[int]
    SHRINK_FACTOR_FIELD_NUMBER: _ClassVar[int]
    PAD_BEG_FIELD_NUMBER: _ClassVar[int]
    PAD_END_FIELD_NUMBER: _ClassVar[int]
    height: int
    width: int
    zoom_factor: int
    shrink_factor: int
    pad_beg: int
    pad_end: int
    def __init__(self, height: _Optional[int] = ..., width: _Optional[int] = ..., zoom_factor: _Optional[int] = ..., shrink_factor: _Optional[int] = ..., pad_beg: _Optional[int] = ..., pad_end: _Optional[int] = ...) -> None: ...

class ShuffleChannelParameter(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: int
    def __init__(self, group: _Optional[int] = ...) -> None: ...

class V1LayerParameter(_message.Message):
    __slots__ = ("bottom", "top", "name", "include", "exclude", "type", "blobs", "param", "blobs_lr", "weight_decay", "loss_weight", "accuracy_param", "argmax_param", "concat_param", "convolution_param", "dropout_param", "eltwise_param", "exp_param", "inner_product_param", "lrn_param", "mvn_param", "pooling_param", "power_param", "relu_param", "sigmoid_param", "softmax_param", "slice_param", "tanh_param", "threshold_param", "transform_param", "loss_param")
    class LayerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        NONE: _ClassVar[V1LayerParameter.LayerType]
        ABSVAL: _ClassVar[V1LayerParameter.LayerType]
        ACCURACY: _ClassVar[V1LayerParameter.LayerType]
        ARGMAX: _ClassVar[V1LayerParameter.LayerType]
        BNLL: _ClassVar[V1LayerParameter.LayerType]
        CONCAT: _ClassVar[V1LayerParameter.LayerType]
        CONTRASTIVE_LOSS: _ClassVar[V1LayerParameter.LayerType]
        CONVOLUTION: _ClassVar[V1LayerParameter.LayerType]
        DATA: _ClassVar[V1LayerParameter.LayerType]
        DECONVOLUTION: _ClassVar[V1LayerParameter.LayerType]
        DROPOUT: _ClassVar[V1LayerParameter.LayerType]
        DUMMY_DATA: _ClassVar[V1LayerParameter.LayerType]
        EUCLIDEAN_LOSS: _ClassVar[V1LayerParameter.LayerType]
        ELTWISE: _ClassVar[V1LayerParameter.LayerType]
        EXP: _ClassVar[V1LayerParameter.LayerType]
        FLATTEN: _ClassVar[V1LayerParameter.LayerType]
        HDF5_DATA: _ClassVar[V1LayerParameter.LayerType]
        HDF5_OUTPUT: _ClassVar[V1LayerParameter.LayerType]
        HINGE_LOSS: _ClassVar[V1LayerParameter.LayerType]
        IM2COL: _ClassVar[V1LayerParameter.LayerType]
        IMAGE_DATA: _ClassVar[V1LayerParameter.LayerType]
        INFOGAIN_LOSS: _ClassVar[V1LayerParameter.LayerType]
        INNER_PRODUCT: _ClassVar[V1LayerParameter.LayerType]
        LRN: _ClassVar[V1LayerParameter.LayerType]
        MEMORY_DATA: _ClassVar[V1LayerParameter.LayerType]
        MULTINOMIAL_LOGISTIC_LOSS: _ClassVar[V1LayerParameter.LayerType]
        MVN: _ClassVar[V1LayerParameter.LayerType]
        POOLING: _ClassVar[V1LayerParameter.LayerType]
        POWER: _ClassVar[V1LayerParameter.LayerType]
        RELU: _ClassVar[V1LayerParameter.LayerType]
        SIGMOID: _ClassVar[V1LayerParameter.LayerType]
        SIGMOID_CROSS_ENTROPY_LOSS: _ClassVar[V1LayerParameter.LayerType]
        SILENCE: _ClassVar[V1LayerParameter.LayerType]
        SOFTMAX: _ClassVar[V1LayerParameter.LayerType]
        SOFTMAX_LOSS: _ClassVar[V1LayerParameter.LayerType]
        SPLIT: _ClassVar[V1LayerParameter.LayerType]
        SLICE: _ClassVar[V1LayerParameter.LayerType]
        TANH: _ClassVar[V1LayerParameter.LayerType]
        WINDOW_DATA: _ClassVar[V1LayerParameter.LayerType]
        THRESHOLD: _ClassVar[V1LayerParameter.LayerType]
    NONE: V1LayerParameter.LayerType
    ABSVAL: V1LayerParameter.LayerType
    ACCURACY: V1LayerParameter.LayerType
    ARGMAX: V1LayerParameter.LayerType
    BNLL: V1LayerParameter.LayerType
    CONCAT: V1LayerParameter.LayerType
    CONTRASTIVE_LOSS: V1LayerParameter.LayerType
    CONVOLUTION: V1LayerParameter.LayerType
    DATA: V1LayerParameter.LayerType
    DECONVOLUTION: V1LayerParameter.LayerType
    DROPOUT: V1LayerParameter.LayerType
    DUMMY_DATA: V1LayerParameter.LayerType
    EUCLIDEAN_LOSS: V1LayerParameter.LayerType
    ELTWISE: V1LayerParameter.LayerType
    EXP: V1LayerParameter.LayerType
    FLATTEN: V1LayerParameter.LayerType
    HDF5_DATA: V1LayerParameter.LayerType
    HDF5_OUTPUT: V1LayerParameter.LayerType
    HINGE_LOSS: V1LayerParameter.LayerType
    IM2COL: V1LayerParameter.LayerType
    IMAGE_DATA: V1LayerParameter.LayerType
    INFOGAIN_LOSS: V1LayerParameter.LayerType
    INNER_PRODUCT: V1LayerParameter.LayerType
    LRN: V1LayerParameter.LayerType
    MEMORY_DATA: V1LayerParameter.LayerType
    MULTINOMIAL_LOGISTIC_LOSS: V1LayerParameter.LayerType
    MVN: V1LayerParameter.LayerType
    POOLING: V1LayerParameter.LayerType
    POWER: V1LayerParameter.LayerType
    RELU: V1LayerParameter.LayerType
    SIGMOID: V1LayerParameter.LayerType
    SIGMOID_CROSS_ENTROPY_LOSS: V1LayerParameter.LayerType
    SILENCE: V1LayerParameter.LayerType
    SOFTMAX: V1LayerParameter.LayerType
    SOFTMAX_LOSS: V1LayerParameter.LayerType
    SPLIT: V1LayerParameter.LayerType
    SLICE: V1LayerParameter.LayerType
    TANH: V1LayerParameter.LayerType
    WINDOW_DATA: V1LayerParameter.LayerType
    THRESHOLD: V1LayerParameter.LayerType
    BOTTOM_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    BLOBS_LR_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    LOSS_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_PARAM_FIELD_NUMBER: _ClassVar[int]
    ARGMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONCAT_PARAM_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_PARAM_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_PARAM_FIELD_NUMBER: _ClassVar[int]
    ELTWISE_PARAM_FIELD_NUMBER: _ClassVar[int]
    EXP_PARAM_FIELD_NUMBER: _ClassVar[int]
    INNER_PRODUCT_PARAM_FIELD_NUMBER: _ClassVar[int]
    LRN_PARAM_FIELD_NUMBER: _ClassVar[int]
    MVN_PARAM_FIELD_NUMBER: _ClassVar[int]
    POOLING_PARAM_FIELD_NUMBER: _ClassVar[int]
    POWER_PARAM_FIELD_NUMBER: _ClassVar[int]
    RELU_PARAM_FIELD_NUMBER: _ClassVar[int]
    SIGMOID_PARAM_FIELD_NUMBER: _ClassVar[int]
    SOFTMAX_PARAM_FIELD_NUMBER: _ClassVar[int]
    SLICE_PARAM_FIELD_NUMBER: _ClassVar[int]
    TANH_PARAM_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_PARAM_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_PARAM_FIELD_NUMBER: _ClassVar[int]
    LOSS_PARAM_FIELD_NUMBER: _ClassVar[int]
    bottom: _containers.RepeatedScalarFieldContainer[str]
    top: _containers.RepeatedScalarFieldContainer[str]
    name: str
    include: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    exclude: _containers.RepeatedCompositeFieldContainer[NetStateRule]
    type: V1LayerParameter.LayerType
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    param: _containers.RepeatedScalarFieldContainer[str]
    blobs_lr: _containers.RepeatedScalarFieldContainer[float]
    weight_decay: _containers.RepeatedScalarFieldContainer[float]
    loss_weight: _containers.RepeatedScalarFieldContainer[float]
    accuracy_param: AccuracyParameter
    argmax_param: ArgMaxParameter
    concat_param: ConcatParameter
    convolution_param: ConvolutionParameter
    dropout_param: DropoutParameter
    eltwise_param: EltwiseParameter
    exp_param: ExpParameter
    inner_product_param: InnerProductParameter
    lrn_param: LRNParameter
    mvn_param: MVNParameter
    pooling_param: PoolingParameter
    power_param: PowerParameter
    relu_param: ReLUParameter
    sigmoid_param: SigmoidParameter
    softmax_param: SoftmaxParameter
    slice_param: SliceParameter
    tanh_param: TanHParameter
    threshold_param: ThresholdParameter
    transform_param: TransformationParameter
    loss_param: LossParameter
    def __init__(self, bottom: _Optional[_Iterable[str]] = ..., top: _Optional[_Iterable[str]] = ..., name: _Optional[str] = ..., include: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., exclude: _Optional[_Iterable[_Union[NetStateRule, _Mapping]]] = ..., type: _Optional[_Union[V1LayerParameter.LayerType, str]] = ..., blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ..., param: _Optional[_Iterable[str]] = ..., blobs_lr: _Optional[_Iterable[float]] = ..., weight_decay: _Optional[_Iterable[float]] = ..., loss_weight: _Optional[_Iterable[float]] = ..., accuracy_param: _Optional[_Union[AccuracyParameter, _Mapping]] = ..., argmax_param: _Optional[_Union[ArgMaxParameter, _Mapping]] = ..., concat_param: _Optional[_Union[ConcatParameter, _Mapping]] = ..., convolution_param: _Optional[_Union[ConvolutionParameter, _Mapping]] = ..., dropout_param: _Optional[_Union[DropoutParameter, _Mapping]] = ..., eltwise_param: _Optional[_Union[EltwiseParameter, _Mapping]] = ..., exp_param: _Optional[_Union[ExpParameter, _Mapping]] = ..., inner_product_param: _Optional[_Union[InnerProductParameter, _Mapping]] = ..., lrn_param: _Optional[_Union[LRNParameter, _Mapping]] = ..., mvn_param: _Optional[_Union[MVNParameter, _Mapping]] = ..., pooling_param: _Optional[_Union[PoolingParameter, _Mapping]] = ..., power_param: _Optional[_Union[PowerParameter, _Mapping]] = ..., relu_param: _Optional[_Union[ReLUParameter, _Mapping]] = ..., sigmoid_param: _Optional[_Union[SigmoidParameter, _Mapping]] = ..., softmax_param: _Optional[_Union[SoftmaxParameter, _Mapping]] = ..., slice_param: _Optional[_Union[SliceParameter, _Mapping]] = ..., tanh_param: _Optional[_Union[TanHParameter, _Mapping]] = ..., threshold_param: _Optional[_Union[ThresholdParameter, _Mapping]] = ..., transform_param: _Optional[_Union[TransformationParameter, _Mapping]] = ..., loss_param: _Optional[_Union[LossParameter, _Mapping]] = ...) -> None: ...

class WeightsNet(_message.Message):
    __slots__ = ("name", "layer", "layers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    layer: _containers.RepeatedCompositeFieldContainer[WeightsLayer]
    layers: _containers.RepeatedCompositeFieldContainer[WeightsV1Layer]
    def __init__(self, name: _Optional[str] = ..., layer: _Optional[_Iterable[_Union[WeightsLayer, _Mapping]]] = ..., layers: _Optional[_Iterable[_Union[WeightsV1Layer, _Mapping]]] = ...) -> None: ...

class WeightsLayer(_message.Message):
    __slots__ = ("name", "type", "blobs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ...) -> None: ...

class WeightsV1Layer(_message.Message):
    __slots__ = ("name", "type", "blobs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: V1LayerParameter.LayerType
    blobs: _containers.RepeatedCompositeFieldContainer[BlobProto]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[_Union[V1LayerParameter.LayerType, str]] = ..., blobs: _Optional[_Iterable[_Union[BlobProto, _Mapping]]] = ...) -> None: ...

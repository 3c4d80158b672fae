"""The errors of the pure core: one tree under ``ResizerError``, a ``ValueError``.

Everything the core raises is input it refuses (a quantity, a config, a selector, a pod's
originals, a key ring, calibration scores), so the base is a ``ValueError``: input checks that
catch ``ValueError`` keep working. A caller that means "the core cannot handle this input" (one
pod, one config) catches ``ResizerError``; one that handles a single case catches its class.
Each class is defined next to the code that raises it (module in parentheses):

    ResizerError           anything the core refuses
    ├── QuantityError      (quantity) a string or number that is not a Kubernetes quantity we accept
    ├── ConfigError        (config) config.yaml is invalid; ``errors`` holds (field path, message) pairs
    ├── ScopeError         (scope) a namespace list or label selector that cannot be used
    ├── OriginalsError     (podstate) an ``original-*`` annotation holds no usable quantity
    │   └── KeyCollisionError  (podstate) two resizable containers map to one ``original-*`` key
    ├── PlanError          (plan) the pod's baseline cannot be sized into quantities Kubernetes holds
    ├── KeyRingError       (integrity) a key ring that cannot be used (bad key id, key too short)
    └── CalibrationError   (calibration) scores or a config that calibrate cannot use
"""


class ResizerError(ValueError):
    """Input the core refuses; the message says why."""

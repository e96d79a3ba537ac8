"""PyObjC's own class builder and metadata, over a stub of its C module: how a Mac would build our classes.

:func:`load_pyobjc` executes pyobjc-core's ``objc/_transform.py``, ``objc/_informal_protocol.py`` and
``objc/_new.py`` from the macOS wheel (:mod:`pyobjc_wheels`) against :class:`ObjCStub`, which supplies
only what the C extension would: the ``objc.selector`` type, formal protocols as the Objective-C runtime
describes them, NSObject's methods, the metadata registry. Defining a subclass of the stub NSObject runs
PyObjC's ``processClassDict`` — signatures and class-method status inherited from NSObject, protocol
signatures, ``validate_protocols`` — as PyObjC's C class builder calls it (``Modules/objc/class-builder.m``,
PyObjCClass_BuildClass, from objc-class.m's class_new).

:func:`return_to_objc` is what the method stub does with a Python method's return value (pyobjc-core 13.0
``Modules/objc/libffi_support.m``, method_stub, lines 1656-1797; ``objc_support.m`` for the conversions).

Runtime facts that are not PyObjC's but the Objective-C runtime's come from
``tests/metal/data/pyobjc_selectors.json`` (the protocol's methods, from PyObjC's header scans) and from
:data:`NSOBJECT_METHODS` (Apple's <objc/NSObject.h>).
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import types

import numpy as np

from pyobjc_wheels import CORE, compiled_from_wheel, execute_metadata, modules_replaced

#: @encode(BOOL) on each architecture: signed char on x86_64, C99 bool on arm64 (<objc/objc.h>).
BOOL_ENCODING = {"arm64": "B", "x86_64": "c"}

#: NSObject's methods by Python name (<objc/NSObject.h>, the root class and the NSObject protocol; Foundation's
#: categories on NSObject add none of these names): {"class" / "instance": {name: signature}}. A name defined
#: by a Python subclass inherits these (objc/_transform.py, transformAttribute: "Copy classmethod-ness and
#: signature from a pre-existing method"). Signatures are given where a test needs them; None fails loudly.
NSOBJECT_METHODS = {
    "class": {"load": "v@:", "initialize": "v@:", "new": "@@:", "alloc": "@@:", "allocWithZone_": None,
              "copyWithZone_": "@@:^{_NSZone=}", "mutableCopyWithZone_": None, "instancesRespondToSelector_": None,
              "conformsToProtocol_": None, "instanceMethodForSelector_": None,
              "instanceMethodSignatureForSelector_": None, "isSubclassOfClass_": None,
              "resolveClassMethod_": None, "resolveInstanceMethod_": None, "superclass": None, "class": None,
              "description": None, "debugDescription": None, "hash": None},
    "instance": {"init": "@@:", "dealloc": "v@:", "finalize": None, "copy": None, "mutableCopy": None,
                 "methodForSelector_": None, "doesNotRecognizeSelector_": None, "forwardingTargetForSelector_": None,
                 "forwardInvocation_": None, "methodSignatureForSelector_": None, "isEqual_": None, "hash": None,
                 "superclass": None, "class": None, "self": None, "performSelector_": None,
                 "performSelector_withObject_": None, "performSelector_withObject_withObject_": None,
                 "isProxy": None, "isKindOfClass_": None, "isMemberOfClass_": None, "conformsToProtocol_": None,
                 "respondsToSelector_": None, "retain": None, "release": None, "autorelease": None,
                 "retainCount": None, "zone": None, "description": None, "debugDescription": None},
}


class NULL_type:
    def __repr__(self):
        return "objc.NULL"


def returns_value(function) -> bool:
    """objc._returns_value (Modules/objc/meth-func.m, PyObjC_returns_value): whether the function has a
    ``return`` of something other than the constant None (decides a default signature's ``v`` or ``@``)."""
    if not isinstance(function, types.FunctionType):
        return True
    previous = None
    for instruction in dis.get_instructions(function):
        if instruction.opname == "RETURN_CONST" and instruction.argval is not None:
            return True
        if instruction.opname == "RETURN_VALUE" and not (
                previous is not None and previous.opname == "LOAD_CONST" and previous.argval is None):
            return True
        previous = instruction
    return False


class ObjCStub(types.ModuleType):
    """The ``objc`` module as pyobjc-core's Python files see it, with the C parts stubbed."""

    _C_ID, _C_SEL, _C_VOID, _C_PythonObject = b"@", b":", b"v", b"^{PyObject=}"

    def __init__(self, table: dict, arch: str):
        super().__init__("objc")
        self.__path__ = []
        self.arch, self._table = arch, table
        self.NULL = NULL_type()
        self.options = types.SimpleNamespace()
        self.error = type("error", (Exception,), {})
        self.BadPrototypeError = type("BadPrototypeError", (self.error,), {})
        self.ProtocolError = type("ProtocolError", (self.error,), {})
        self.ObjCSuperWarning = type("ObjCSuperWarning", (Warning,), {})
        self.super = super
        #: {(class name, selector): metadata} (bytes keys, as registered): registry.m keeps one per pair
        self.registry: dict[tuple[bytes, bytes], dict] = {}
        self.registrations: list[tuple[bytes, bytes, dict]] = []
        self.class_names = {"NSObject"}                                    # what objc_lookUpClass finds
        self.selector, self.native_selector, self.bound_selector = selector, native_selector, bound_selector
        self.formal_protocol, self.ivar = formal_protocol, ivar
        self._returns_value = returns_value

    def registerMetaDataForSelector(self, class_name, selector_name, metadata):  # noqa: N802 - objc's API
        if not isinstance(class_name, bytes) or not isinstance(selector_name, bytes):
            raise TypeError("registerMetaDataForSelector takes bytes for the class and the selector")
        self.registry[(class_name, selector_name)] = metadata            # replaces (PyObjC_AddToRegistry)
        self.registrations.append((class_name, selector_name, metadata))

    def _registeredMetadataForSelector(self, class_object, selector_name):  # noqa: N802
        """module.m: the registration found for the class (or a superclass), as a dict; None if none."""
        for cls in class_object.__mro__:
            found = self.registry.get((cls.__name__.encode(), selector_name))
            if found is not None:
                return {"retval": found.get("retval"), "arguments": [found.get("arguments", {}).get(i)
                                                                      for i in range(2 + selector_name.count(b":"))]}
        return None

    def protocolNamed(self, name):  # noqa: N802
        """A formal protocol as the Objective-C runtime describes it (formal-protocol.m), from the table."""
        entry = self._table["protocols"].get(name)
        if entry is None:
            raise self.ProtocolError(f"protocol {name!r} does not exist")
        bool_code = BOOL_ENCODING[self.arch]

        def encoded(typestr):
            return bool_code if typestr == "Z" else typestr

        methods = [dict(selector=m["selector"].encode(), required=m["required"], class_method=m["class_method"],
                        typestr=(encoded(m["retval"]) + "@:" + "".join(encoded(a) for a in m["args"])).encode())
                   for m in entry["methods"]]
        return formal_protocol(name, methods)

    def splitSignature(self, signature):  # noqa: N802
        """objc.splitSignature: the encoding's types, one bytes each."""
        text, parts = signature.decode(), []
        while text:
            length = _type_length(text)
            parts.append(text[:length].encode())
            text = text[length:]
        return tuple(parts)


class selector:  # noqa: N801 - objc.selector
    """objc.selector (selector.m): a Python callable with its selector, signature and class-method status.
    ``signature`` is what was given: a selector made before its class exists has no class to find
    registered metadata for (selector.m PyObjCSelector_GetMetadata with sel_class nil)."""

    def __init__(self, callable, selector=None, signature=None, isClassMethod=False,  # noqa: A002, N803
                 isRequired=True, isHidden=False):  # noqa: N803
        if selector is None:
            selector = callable.__name__.replace("_", ":").encode()
        if signature is None:
            count = selector.count(b":")
            signature = (b"@" if returns_value(callable) else b"v") + b"@:" + b"@" * count
        self.callable, self.selector, self.signature = callable, selector, signature
        self.isClassMethod, self.isRequired, self.isHidden = bool(isClassMethod), isRequired, isHidden

    def __get__(self, instance, owner):
        if self.isClassMethod:
            return functools.partial(self.callable, owner)
        return self if instance is None else functools.partial(self.callable, instance)

    def __repr__(self):
        kind = "class" if self.isClassMethod else "instance"
        return f"<objc.selector {self.selector.decode()} {self.signature.decode()} ({kind} method)>"


class native_selector(selector):  # noqa: N801
    """A method the Objective-C class has (here: NSObject's), with the runtime's signature."""

    def __init__(self, name: bytes, signature: bytes | None, isClassMethod: bool):  # noqa: N803
        self.callable, self.selector, self._signature = None, name, signature
        self.isClassMethod, self.isRequired, self.isHidden = isClassMethod, True, False

    @property
    def signature(self):
        if self._signature is None:
            raise LookupError(f"NSObject's {self.selector.decode()!r} has no signature in NSOBJECT_METHODS "
                              "(tests/metal/pyobjc_runtime.py): a class defines that name; add it from "
                              "<objc/NSObject.h>")
        return self._signature


class bound_selector(selector):  # noqa: N801
    pass


class formal_protocol:  # noqa: N801
    """objc.formal_protocol (formal-protocol.m): the protocol's own methods, required then optional."""

    def __init__(self, name, methods):
        self.__name__, self._methods = name, methods

    def _list(self, class_methods):
        ordered = sorted((m for m in self._methods if m["class_method"] == class_methods),
                         key=lambda m: not m["required"])
        return [dict(selector=m["selector"], typestr=m["typestr"], required=m["required"]) for m in ordered]

    def instanceMethods(self):  # noqa: N802
        return self._list(False)

    def classMethods(self):  # noqa: N802
        return self._list(True)

    def _describe(self, name, class_methods):
        name = name.encode() if isinstance(name, str) else name
        found = next((m for m in self._methods if m["selector"] == name and m["class_method"] == class_methods), None)
        return None if found is None else (found["selector"], found["typestr"])

    def descriptionForInstanceMethod_(self, name):  # noqa: N802
        return self._describe(name, False)

    def descriptionForClassMethod_(self, name):  # noqa: N802
        return self._describe(name, True)


class ivar:  # noqa: N801
    def __init__(self, name=None, type=b"@", isSlot=False):  # noqa: A002, N803
        self.__name__, self.type, self.isSlot = name, type, isSlot


class _Methods:
    """``cls.pyobjc_instanceMethods`` / ``pyobjc_classMethods``: the class's methods by Python name."""

    def __init__(self, methods: dict):
        self._methods = methods

    def __getattr__(self, name):
        if name in self._methods:
            return self._methods[name]
        raise AttributeError(name)


class objc_class(type):  # noqa: N801
    """The metaclass of Objective-C classes. A Python subclass is built as class-builder.m's
    PyObjCClass_BuildClass does: a class name the runtime already has is refused, then
    ``objc.options._processClassDict`` (PyObjC's _transform.processClassDict) turns the class body into
    selectors and checks the protocols; class methods go to the metaclass side. The ``__dict__`` ivar it
    adds becomes the instances' ``__dict__`` (here: no ``__slots__``)."""

    def __new__(mcls, name, bases, namespace, protocols=(), **kwargs):
        objc = mcls._objc
        base = bases[0]
        if name in objc.class_names:
            raise objc.error(f"{name} is overriding existing Objective-C class")
        class_dict, meta_dict, hidden_instance, hidden_class = dict(namespace), {}, {}, {}
        _, instance_methods, class_methods, _ = objc.options._processClassDict(
            name, class_dict, meta_dict, base, list(protocols), hidden_instance, hidden_class)
        class_dict.pop("__slots__", None)
        cls = super().__new__(mcls, name, bases, class_dict)
        cls.__objc_instance_methods__ = {sel.selector: sel for sel in instance_methods}
        cls.__objc_class_methods__ = {sel.selector: sel for sel in class_methods}
        cls.__objc_protocols__ = tuple(protocols)
        objc.class_names.add(name)
        for key, value in meta_dict.items():
            setattr(cls, key, classmethod(value.callable))
        return cls

    def __init__(cls, name, bases, namespace, protocols=(), **kwargs):
        super().__init__(name, bases, namespace)

    def objc_method(cls, selector_name: bytes, class_method: bool = False):
        """The selector the Objective-C runtime dispatches ``selector_name`` to, or None (unrecognized)."""
        for klass in cls.__mro__:
            table = getattr(klass, "__objc_class_methods__" if class_method else "__objc_instance_methods__", {})
            if selector_name in table:
                return table[selector_name]
        return None


def make_nsobject(objc: ObjCStub):
    """The stub NSObject (and objc.objc_object), created without the class builder."""
    metaclass = type("objc_class", (objc_class,), {"_objc": objc})      # one per stub: its own registry
    objc.objc_class = metaclass

    def natives(kind):
        return {name: native_selector(name.replace("_", ":").encode(),
                                      None if signature is None else signature.encode(), kind == "class")
                for name, signature in NSOBJECT_METHODS[kind].items()}

    def alloc(cls):
        return object.__new__(cls)

    def init(self):
        return self

    body = dict(__hasdict__=False, pyobjc_instanceMethods=_Methods(natives("instance")),
                pyobjc_classMethods=_Methods(natives("class")),
                pyobjc_hiddenSelectors=classmethod(lambda cls, isclass: {}),
                alloc=classmethod(alloc), init=init, __objc_instance_methods__={}, __objc_class_methods__={})
    nsobject = type.__new__(metaclass, "NSObject", (object,), body)
    objc.objc_object = nsobject
    return nsobject


def load_pyobjc(folder, table: dict, arch: str = "arm64"):
    """(objc stub with PyObjC's pure-Python class builder installed, NSObject), metadata registered by
    importing Foundation, Metal, MetalPerformanceShaders (the wheels' _metadata.py, in import order)."""
    objc = ObjCStub(table, arch)
    nsobject = make_nsobject(objc)
    loaded = {}
    with modules_replaced({"objc": objc}):
        for name in ("_informal_protocol", "_new", "_transform"):
            spec = importlib.util.spec_from_loader(f"objc.{name}", loader=None)
            module = importlib.util.module_from_spec(spec)
            loaded[f"objc.{name}"] = module
            setattr(objc, name, module)
            with modules_replaced(loaded):
                exec(compiled_from_wheel(folder, CORE, f"objc/{name}.py"), module.__dict__)
    objc.informal_protocol = loaded["objc._informal_protocol"].informal_protocol
    execute_metadata(folder, lambda framework, cls, sel, meta: objc.registerMetaDataForSelector(cls, sel, meta),
                     arch=arch, selector=selector, informal_protocol=objc.informal_protocol)
    objc.registrations.clear()                          # what the frameworks registered is not ours
    return objc, nsobject


# --------------------------------------------------------------------------------------------------
# A Python method's return value, as the method stub converts it for Objective-C
# --------------------------------------------------------------------------------------------------

QUALIFIERS = "rnNoORVA"
INTEGER_LIMITS = {"c": (-2**7, 2**7 - 1), "C": (0, 2**8 - 1), "s": (-2**15, 2**15 - 1), "S": (0, 2**16 - 1),
                  "i": (-2**31, 2**31 - 1), "I": (0, 2**32 - 1), "l": (-2**63, 2**63 - 1), "L": (0, 2**64 - 1),
                  "q": (-2**63, 2**63 - 1), "Q": (0, 2**64 - 1)}


def method_return_type(method: selector, objc: ObjCStub, cls, metadata_applies: bool) -> tuple[str, dict]:
    """(return typestr, its metadata) PyObjC converts a Python method's result with.

    The method's signature, and — if ``metadata_applies`` — the registration found for its class
    (method-signature.m, PyObjCMethodSignature_ForSelector → process_metadata_object; for a Python
    method the registered type replaces the encoded one: merge_descr, ``if (!is_native ...) return meta``).
    Whether PyObjC finds that registration for a class built with ``protocols=`` is open (the selector
    is made before its class exists): tests run both ways."""
    typestr = method.signature.decode()
    rettype = typestr[:_type_length(typestr)]
    if not metadata_applies:
        return rettype, {}
    registered = objc._registeredMetadataForSelector(cls, method.selector)
    meta = dict((registered or {}).get("retval") or {})
    if "type" in meta:
        rettype = meta["type"].decode() if isinstance(meta["type"], bytes) else meta["type"]
    return rettype, meta


def _type_length(typestr: str) -> int:
    """Length of the first type of an encoding without offsets (qualifiers, pointers, nested aggregates)."""
    i = 0
    while typestr[i] in QUALIFIERS or typestr[i] == "^":
        i += 1
    if typestr[i] in "{([<":
        depth = 0
        for j in range(i, len(typestr)):
            depth += {"{": 1, "(": 1, "[": 1, "<": 1, "}": -1, ")": -1, "]": -1, ">": -1}.get(typestr[j], 0)
            if depth == 0:
                return j + 1
    return i + 1


def return_to_objc(value, rettype: str, meta: dict, objc: ObjCStub, what: str):
    """What the method stub makes of ``value`` returned for ``rettype`` (libffi_support.m 1656-1797).

    ``void``: anything but None raises ValueError "did not return None, expecting void return value"
    (1783-1795). A pointer: ``objc.NULL`` is NULL before anything else (1667-1668); otherwise a
    variable-length array (``c_array_of_variable_length``, 1691-1698) goes through
    depythonify_c_return_array_count (objc_support.m 1619-1645): ``PyObjCSequence_Tuple(value,
    "Sequence required")`` and each item converted with the element type, into an autoreleased buffer
    (returned here as a numpy array); a plain pointer (1671-1677) through depythonify_c_value
    (objc_support.m 2981-3008): None is NULL, ``^v`` an unsigned long (an int address, 2987-2992), any
    other pointer type needs a PyObjC pointer wrapper ("depythonifying 'pointer', got ..."). Anything
    else: depythonify_c_value of the type.
    """
    code = rettype.lstrip(QUALIFIERS)
    if code == "v":
        if value is not None:
            raise ValueError(f"{what}: did not return None, expecting void return value")
        return None
    if code[0] in "^*":
        if value is objc.NULL:
            return None
        element = code[1:]
        if meta.get("c_array_of_variable_length"):
            try:
                items = tuple(value)                          # PySequence_Tuple (objc_util.m 1764-1790)
            except TypeError:
                raise TypeError(f"{what}: Sequence required") from None
            converted = [to_c_value(item, element, objc, what) for item in items]
            return np.array(converted, dtype={"f": np.float32, "d": np.float64}.get(element, object))
        if value is None:
            return None
        if element == "v":
            return to_c_value(value, "Q", objc, what, description="unsigned long")
        raise ValueError(f"{what}: depythonifying 'pointer', got '{type(value).__name__}'")
    return to_c_value(value, code, objc, what)


def to_c_value(value, code: str, objc: ObjCStub, what: str, description: str | None = None):
    """depythonify_c_value (objc_support.m 2663-3155) for the types our methods return."""
    code = code.lstrip(QUALIFIERS)
    if code[0] in INTEGER_LIMITS:
        # depythonify_(un)signed_int_value (2279-2430): an int, or what PyNumber_Long takes (numpy ints);
        # bytes/str refused. A BOOL encoded ``c`` (x86_64) is a signed char: True/False are ints.
        if isinstance(value, (bytes, bytearray, str)) or value is None:
            raise ValueError(f"{what}: depythonifying '{description or code}', got '{type(value).__name__}'")
        try:
            number = int(value.__index__()) if not isinstance(value, float) else int(value)
        except (AttributeError, TypeError):
            raise ValueError(f"{what}: depythonifying '{description or code}', got '{type(value).__name__}'") from None
        low, high = INTEGER_LIMITS[code[0]]
        if not low <= number <= high and not (code[0].isupper() and -high <= number < 0):
            raise ValueError(f"{what}: depythonifying '{description or code}', got '{type(value).__name__}' of "
                             "wrong magnitude")
        return number
    if code[0] in "BZ":
        return bool(value)                                               # _C_BOOL / _C_NSBOOL: PyObject_IsTrue
    if code[0] in "fd":
        if isinstance(value, (bytes, str)) or value is None:
            raise ValueError(f"{what}: depythonifying '{code}', got '{type(value).__name__}'")
        return float(value)
    if code[0] == "v":
        raise ValueError(f"{what}: depythonifying unknown typespec 0x76")     # no case for _C_VOID (3153)
    return value                                                         # '@': the object (bridged)

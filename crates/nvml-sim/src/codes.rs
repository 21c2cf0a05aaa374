//! `nvmlReturn_t` codes: their numbers, their names in scenario files, their messages.

/// An `nvmlReturn_t` value.
pub type Code = u32;

pub const SUCCESS: Code = 0;
pub const UNINITIALIZED: Code = 1;
pub const INVALID_ARGUMENT: Code = 2;
pub const NOT_SUPPORTED: Code = 3;
pub const NO_PERMISSION: Code = 4;
pub const NOT_FOUND: Code = 6;
pub const INSUFFICIENT_SIZE: Code = 7;
pub const DRIVER_NOT_LOADED: Code = 9;
pub const TIMEOUT: Code = 10;
pub const FUNCTION_NOT_FOUND: Code = 13;
pub const GPU_IS_LOST: Code = 15;
pub const ARGUMENT_VERSION_MISMATCH: Code = 25;
pub const UNKNOWN: Code = 999;

/// (code, name without `NVML_ERROR_`, message as `nvmlErrorString` gives it).
pub const TABLE: &[(Code, &str, &str)] = &[
    (0, "SUCCESS", "Success"),
    (1, "UNINITIALIZED", "Uninitialized"),
    (2, "INVALID_ARGUMENT", "Invalid Argument"),
    (3, "NOT_SUPPORTED", "Not Supported"),
    (4, "NO_PERMISSION", "Insufficient Permissions"),
    (5, "ALREADY_INITIALIZED", "Already Initialized"),
    (6, "NOT_FOUND", "Not Found"),
    (7, "INSUFFICIENT_SIZE", "Insufficient Size"),
    (8, "INSUFFICIENT_POWER", "Insufficient External Power"),
    (9, "DRIVER_NOT_LOADED", "Driver Not Loaded"),
    (10, "TIMEOUT", "Timeout"),
    (11, "IRQ_ISSUE", "Interrupt Request Issue"),
    (12, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"),
    (13, "FUNCTION_NOT_FOUND", "Function Not Found"),
    (14, "CORRUPTED_INFOROM", "Corrupted infoROM"),
    (15, "GPU_IS_LOST", "GPU is lost"),
    (16, "RESET_REQUIRED", "GPU requires restart"),
    (
        17,
        "OPERATING_SYSTEM",
        "The operating system has blocked the request.",
    ),
    (
        18,
        "LIB_RM_VERSION_MISMATCH",
        "RM has detected an NVML/RM version mismatch.",
    ),
    (19, "IN_USE", "In use by another client"),
    (20, "MEMORY", "Insufficient Memory"),
    (21, "NO_DATA", "No data"),
    (22, "VGPU_ECC_NOT_SUPPORTED", "ECC is not supported on vGPU"),
    (23, "INSUFFICIENT_RESOURCES", "Insufficient resources"),
    (24, "FREQ_NOT_SUPPORTED", "Frequency not supported"),
    (25, "ARGUMENT_VERSION_MISMATCH", "Argument version mismatch"),
    (26, "DEPRECATED", "Deprecated"),
    (27, "NOT_READY", "Not ready"),
    (28, "GPU_NOT_FOUND", "GPU not found"),
    (29, "INVALID_STATE", "Invalid state"),
    (30, "RESET_TYPE_NOT_SUPPORTED", "Reset type not supported"),
    (999, "UNKNOWN", "Unknown Error"),
];

/// The code for a scenario error name such as `"GPU_IS_LOST"` (an `NVML_ERROR_` prefix is accepted).
pub fn code_from_name(name: &str) -> Option<Code> {
    let name = name.strip_prefix("NVML_ERROR_").unwrap_or(name);
    TABLE.iter().find(|(_, n, _)| *n == name).map(|(c, _, _)| *c)
}

/// The name of a code, `"UNKNOWN"` for codes outside the table.
pub fn code_name(code: Code) -> &'static str {
    TABLE
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or("UNKNOWN", |(_, n, _)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_prefix_is_optional() {
        for (code, name, _) in TABLE {
            assert_eq!(code_from_name(name), Some(*code));
            assert_eq!(code_name(*code), *name);
        }
        assert_eq!(code_from_name("NVML_ERROR_GPU_IS_LOST"), Some(GPU_IS_LOST));
        assert_eq!(code_from_name("LOST"), None);
        assert_eq!(code_name(4242), "UNKNOWN");
    }
}

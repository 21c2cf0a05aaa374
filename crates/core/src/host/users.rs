//! Owners' names from the user database (NSS), asked one UID at a time and remembered.

use foldhash::HashMap;

/// User names by UID, asked of the user database (NSS: files, LDAP, SSSD...) one UID at a time
/// when a process of it is first seen, and remembered. Listing every user up front instead
/// took half a one-shot's instructions, misses directory users wherever enumeration is off
/// (SSSD's default), and never learns of an account made later.
#[derive(Debug, Default)]
pub(super) struct UserNames {
    /// `None`: the database has no name for the UID; it is shown as the number.
    known: HashMap<u32, Option<String>>,
}

impl UserNames {
    pub(super) fn name(&mut self, uid: u32) -> String {
        self.known
            .entry(uid)
            .or_insert_with(|| user_name_of(uid))
            .clone()
            .unwrap_or_else(|| uid.to_string())
    }
}

/// The user database's name for `uid`.
pub fn user_name_of(uid: u32) -> Option<String> {
    let mut buffer = vec![0u8; 1024];
    loop {
        // SAFETY: passwd is a plain C struct; all zeroes is a valid value to be overwritten.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call and the buffer's length goes with it.
        let error = unsafe {
            libc::getpwuid_r(
                uid,
                &mut entry,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut found,
            )
        };
        if error == libc::ERANGE && buffer.len() < 1 << 20 {
            buffer.resize(buffer.len() * 2, 0);
            continue;
        }
        if error != 0 || found.is_null() || entry.pw_name.is_null() {
            return None;
        }
        // SAFETY: on success pw_name points at a NUL-terminated string inside `buffer`.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
        return Some(name.to_string_lossy().into_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_named_by_the_user_database_and_unknown_ones_by_number() {
        let mut users = UserNames::default();
        assert_eq!(users.name(0), "root");
        // The database's own answer for this process's user, whatever it is.
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        let expected = std::process::Command::new("id").arg("-un").output().unwrap();
        assert_eq!(users.name(me), String::from_utf8_lossy(&expected.stdout).trim());
        // A UID no database names.
        assert_eq!(users.name(u32::MAX - 1), (u32::MAX - 1).to_string());
        assert_eq!(users.known.len(), 2 + usize::from(me != 0), "each asked once");
        assert_eq!(users.name(0), "root");
        assert_eq!(users.known.len(), 2 + usize::from(me != 0));
    }
}

//! What [`DeciderRef`](crate::react::DeciderRef) and
//! [`RetryDeciderRef`](crate::process::RetryDeciderRef), and their registries, share: a
//! function recorded by name (serialized as the name, compared by name) and functions by name.

/// For `$ref`, a struct with a `name` (built from a `$name`: a `String` or a
/// `Cow<'static, str>`), an `f: Option<$f>` and a `Default` (the built-in function, the one name
/// deserializing resolves): `unresolved`, the accessors, `Debug`, `PartialEq`, `Eq`,
/// `Serialize` and `Deserialize`. For `$reg`, a struct with `deciders: BTreeMap<String, $f>`, a
/// `new()` and a `register(name, f: $arg)`: `Default` (`new`), `with`, `with_ref`, `get`,
/// `names` and `resolve` (a name it lacks is an `$unknown`).
macro_rules! named_fn {
    ($ref:ident($name:ty), $reg:ident($arg:ty), $unknown:ident, $f:ty) => {
        impl $ref {
            /// A name without a function (what deserializing an unknown name gives).
            pub fn unresolved(name: $name) -> Self {
                $ref {
                    name: name.into(),
                    f: None,
                }
            }

            /// The name the function is recorded under.
            pub fn name(&self) -> &str {
                &self.name
            }

            /// The function, if the name is resolved.
            pub fn function(&self) -> Option<$f> {
                self.f.clone()
            }

            /// Whether the reference has its function.
            pub fn is_resolved(&self) -> bool {
                self.f.is_some()
            }
        }

        impl std::fmt::Debug for $ref {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ref))
                    .field("name", &self.name)
                    .field("resolved", &self.is_resolved())
                    .finish()
            }
        }

        impl PartialEq for $ref {
            /// Compared by name (functions and closures have no reliable identity).
            fn eq(&self, other: &Self) -> bool {
                self.name == other.name
            }
        }

        impl Eq for $ref {}

        impl serde::Serialize for $ref {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.name)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ref {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                let builtin = Self::default();
                Ok(match builtin.name == name.as_str() {
                    true => builtin,
                    false => Self::unresolved(name),
                })
            }
        }

        impl Default for $reg {
            fn default() -> Self {
                Self::new()
            }
        }

        impl $reg {
            /// Registers `f` under `name` (builder style).
            pub fn with(mut self, name: impl Into<String>, f: $arg) -> Self {
                self.register(name, f);
                self
            }

            /// Registers a named decider.
            pub fn with_ref(self, decider: &$ref) -> Self {
                match decider.function() {
                    Some(f) => self.with(decider.name(), f),
                    None => self,
                }
            }

            /// The function registered under `name`.
            pub fn get(&self, name: &str) -> Option<$f> {
                self.deciders.get(name).cloned()
            }

            /// The registered names, sorted.
            pub fn names(&self) -> Vec<String> {
                self.deciders.keys().cloned().collect()
            }

            /// The reference named like `decider`, with this registry's function (the
            /// built-in one keeps its static name).
            pub fn resolve(&self, decider: &$ref) -> Result<$ref, $unknown> {
                let builtin = $ref::default();
                match self.get(decider.name()) {
                    Some(f) if builtin == *decider => Ok($ref::new(builtin.name, f)),
                    Some(f) => Ok($ref::new(decider.name().to_string(), f)),
                    None => Err($unknown {
                        name: decider.name().to_string(),
                        known: self.names(),
                    }),
                }
            }
        }
    };
}

pub(crate) use named_fn;

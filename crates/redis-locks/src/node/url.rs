//! Redis URLs: what is wrong with one that cannot name a server, and how to show one without
//! its password.

/// Says what is wrong with a URL that cannot name a Redis server, in words: empty, no scheme,
/// a scheme other than `redis`, `rediss` (TLS), `unix` or `redis+unix`, no host, a bad port.
pub(crate) fn check_url(text: &str) -> std::result::Result<(), String> {
    if text.trim().is_empty() {
        return Err("the URL is empty; write it like redis://host:6379".into());
    }
    let url = url::Url::parse(text).map_err(|err| match err {
        url::ParseError::RelativeUrlWithoutBase => {
            "it has no scheme; write it like redis://host:6379".to_string()
        }
        url::ParseError::InvalidPort => "the port must be a number from 1 to 65535".to_string(),
        other => format!("{other}; write it like redis://host:6379"),
    })?;
    match url.scheme() {
        "redis" | "rediss" => {}
        "unix" | "redis+unix" => return Ok(()),
        other => {
            return Err(format!(
                "the scheme {other:?} is not Redis's; write it like redis://host:6379"
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("it names no host; write it like redis://host:6379".into());
    }
    if url.port() == Some(0) {
        return Err("the port must be a number from 1 to 65535".into());
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Err(format!(
            "the database {db:?} is not a number (redis://host:6379/0)"
        ));
    }
    Ok(())
}

/// The URL with any password replaced, for messages and `Debug`. Text of several URLs
/// separated by spaces (a cluster's seeds, a set of sentinels) has every one replaced.
pub(crate) fn redact(url: &str) -> String {
    url.split(' ').map(redact_one).collect::<Vec<_>>().join(" ")
}

/// One URL with its password replaced: the user information ends at the last `@` of the
/// URL (a password written with a raw `@` is hidden whole), and the password starts after
/// its first `:`; a `pass=` or `password=` query value (a `unix://` socket's) is hidden too.
fn redact_one(url: &str) -> String {
    let url = &redact_query(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        // No `//` (`redis:user:secret@host`, a mistake): everything between the scheme's
        // `:` and the last `@` is hidden.
        return match (url.split_once(':'), url.rsplit_once('@')) {
            (Some((scheme, _)), Some((_, host))) => format!("{scheme}:***@{host}"),
            _ => url.to_string(),
        };
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// `url` with the value of every `pass=` or `password=` query parameter replaced.
fn redact_query(url: &str) -> String {
    let Some((head, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let query = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name == "pass" || name == "password" => format!("{name}=***"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&");
    match fragment {
        Some(fragment) => format!("{head}?{query}#{fragment}"),
        None => format!("{head}?{query}"),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn url_errors_say_what_is_wrong() {
        for (url, says) in [
            ("", "empty"),
            ("localhost:6379", "scheme"),
            ("http://host:6379", "\"http\""),
            ("redis://host:70000", "1 to 65535"),
            ("redis://host:0", "1 to 65535"),
            ("redis://:6379", "host"),
            ("redis://host:6379/zero", "not a number"),
        ] {
            let reason = super::check_url(url).unwrap_err();
            assert!(reason.contains(says), "{url:?}: {reason}");
        }
        for good in [
            "redis://127.0.0.1:6380",
            "redis://:pw@host/2",
            "unix:///tmp/r.sock",
            "rediss://user:pw@host:6380",
        ] {
            assert_eq!(super::check_url(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            redact("redis://:secret@host:6000"),
            "redis://:***@host:6000"
        );
        assert_eq!(redact("redis://user:secret@host"), "redis://user:***@host");
        assert_eq!(redact("redis://host:6000/2"), "redis://host:6000/2");
        assert_eq!(
            redact("rediss://u:p@ss:w@rd@host:1#insecure"),
            "rediss://u:***@host:1#insecure"
        );
        assert_eq!(redact("redis:u:secret@h:1"), "redis:***@h:1");
        assert_eq!(
            redact("unix:///s.sock?db=1&pass=hush&user=u"),
            "unix:///s.sock?db=1&pass=***&user=u"
        );
        assert_eq!(
            redact("redis+unix:///s.sock?password=hush#x"),
            "redis+unix:///s.sock?password=***#x"
        );
        assert_eq!(
            redact("redis://:one@a:1 redis://b:2 redis://u:two@c:3"),
            "redis://:***@a:1 redis://b:2 redis://u:***@c:3"
        );
    }
}

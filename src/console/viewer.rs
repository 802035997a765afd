//! Who is looking at a console page: the API's caller (a key, a browser session, or the
//! anonymous operator when no keys are configured). A browser that is not signed in is sent to
//! `/ui/login`, and back to the page it asked for afterwards.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::error::InternalError;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, HttpResponse};

use crate::http::{ApiError, Caller, by_session};
use crate::run::RunId;
use crate::services::Services;
use crate::store::StoreError;
use crate::store::runs::{self, RunRow};

pub struct Viewer {
    pub caller: Caller,
    /// Signed in through `/ui/login` (so the page offers to sign out).
    pub signed_in: bool,
}

impl FromRequest for Viewer {
    type Error = actix_web::Error;
    type Future = Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(Self::of(req).map_err(|error| match error {
            ApiError::Unauthenticated | ApiError::InvalidKey => {
                sign_in_first(req.uri().path_and_query().map_or("/ui/runs", |p| p.as_str()))
            }
            other => other.into(),
        }))
    }
}

/// A redirect to the sign-in page, which comes back to `next`.
fn sign_in_first(next: &str) -> actix_web::Error {
    let mut url = String::from("/ui/login?");
    url.push_str(&url::form_urlencoded::Serializer::new(String::new()).append_pair("next", next).finish());
    let response = HttpResponse::SeeOther().insert_header((header::LOCATION, url)).finish();
    InternalError::from_response("sign in first", response).into()
}

impl Viewer {
    /// Who is looking, read from the request alone (its key or session): also where no extractor
    /// runs, as in an error handler.
    pub fn of(req: &HttpRequest) -> Result<Self, ApiError> {
        Ok(Self { caller: Caller::from_request(req, &mut Payload::None).into_inner()?, signed_in: by_session(req) })
    }

    /// Run `run_id`'s row, if there is one this viewer may see (`None` is "not found" either way,
    /// as the API answers).
    pub async fn run_row(&self, services: &Services, run_id: &RunId) -> Result<Option<RunRow>, StoreError> {
        let key = run_id.to_string();
        match services.store.read(move |conn| runs::get(conn, &key)).await {
            Ok(row) => Ok(Some(row).filter(|row| self.caller.may_see(row.owner.as_deref()))),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }
}
